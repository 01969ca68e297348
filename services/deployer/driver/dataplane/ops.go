package dataplane

import (
	"fmt"
	"github.com/weftio/weft/services/deployer/driver/internal/mapfile"
	"net/http"
	"net/url"
)

// runtimeServer is the body of the runtime server endpoint: the settings the
// driver sets.
type runtimeServer struct {
	Address    string `json:"address,omitempty"`
	Port       *int   `json:"port,omitempty"`
	Weight     *int   `json:"weight,omitempty"`
	AdminState string `json:"admin_state"`
}

// serverOp sets a server's address, port, weight and state in one call.
func serverOp(c serverChange) runtimeOp {
	state := "ready"
	if c.new.maint {
		state = "maint"
	}
	w := c.new.effectiveWeight()
	body := runtimeServer{Weight: &w, AdminState: state}
	// A non-literal address did not change (diffConfig made sure): it is
	// left alone.
	if c.new.addr.IsValid() {
		port := int(c.new.addr.Port())
		body.Address, body.Port = c.new.addr.Addr().String(), &port
	}
	show := fmt.Sprintf("set server %s/%s", c.backend, c.name)
	if body.Address != "" {
		show += fmt.Sprintf(" addr %s port %d", body.Address, *body.Port)
	}
	show += fmt.Sprintf(" weight %d state %s", w, state)
	return runtimeOp{show: show, req: request{
		method: http.MethodPut,
		path:   "/services/haproxy/runtime/backends/" + escape(c.backend) + "/servers/" + escape(c.name),
		body:   jsonBody(body), contentType: "application/json", want: []int{http.StatusOK},
	}}
}

// mapOps adds and changes entries before removing others, so that a key
// moving to another value is never missing.
func mapOps(ref, shown string, p mapfile.Patch) []runtimeOp {
	base := "/services/haproxy/runtime/maps/" + escape(ref) + "/entries"
	var ops []runtimeOp
	for _, e := range p.Adds {
		ops = append(ops, runtimeOp{show: "add map " + shown + " " + e.Key + " " + e.Value, req: request{
			method: http.MethodPost, path: base,
			body: jsonBody(map[string]string{"key": e.Key, "value": e.Value}), contentType: "application/json",
			want: []int{http.StatusCreated},
		}})
	}
	for _, e := range p.Sets {
		ops = append(ops, runtimeOp{show: "set map " + shown + " " + e.Key + " " + e.Value, req: request{
			method: http.MethodPut, path: base + "/" + escape(e.Key),
			body: jsonBody(map[string]string{"value": e.Value}), contentType: "application/json",
			want: []int{http.StatusOK},
		}})
	}
	for _, k := range p.Dels {
		ops = append(ops, runtimeOp{show: "del map " + shown + " " + k, req: request{
			method: http.MethodDelete, path: base + "/" + escape(k), want: []int{http.StatusNoContent},
		}})
	}
	return ops
}

// certOp replaces a loaded certificate (the API sets it and commits the
// runtime transaction).
func certOp(ref string, it item) runtimeOp {
	body, ct := multipartFile(it.name, it.Content)
	return runtimeOp{show: "set ssl cert " + it.Path, req: request{
		method: http.MethodPut, path: "/services/haproxy/runtime/ssl_certs/" + escape(ref),
		body: body, contentType: ct, want: []int{http.StatusOK},
	}}
}

// query builds a query string from pairs.
func query(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q
}
