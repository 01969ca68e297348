package dataplanetest

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func (s *Server) send(t *testing.T, method, path, contentType, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(s.User(), s.Password())
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestViolations: requests and answers outside the specification are
// recorded; those inside it are not.
func TestViolations(t *testing.T) {
	tests := []struct {
		name                      string
		method, path, ctype, body string
		want                      string // in the violation; "" for none
	}{
		{"valid read", "GET", "/v3/services/haproxy/configuration/raw", "", "", ""},
		{"unknown operation", "GET", "/v3/services/haproxy/no_such_thing", "", "", "no operation in the specification"},
		{"missing required version", "POST", "/v3/services/haproxy/transactions", "", "", "version"},
		{"bad enum", "PUT", "/v3/services/haproxy/runtime/backends/be/servers/s1", "application/json", `{"admin_state":"bogus"}`, "admin_state"},
		{"bad reload id", "GET", "/v3/services/haproxy/reloads/abc", "", "", "pattern"},
		{"wrong body type", "POST", "/v3/services/haproxy/runtime/maps/m/entries", "application/json", `{"key":1}`, "key"},
		{"bad answer", "GET", "/v3/services/haproxy/runtime/backends/be_bad/servers", "", "", "answer 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t, Options{})
			// An answer that breaks the runtime_servers schema.
			s.mux.HandleFunc("GET "+api+"/runtime/backends/be_bad/servers", func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, http.StatusOK, []map[string]any{{"name": "s1", "port": "eighty"}})
			})
			s.send(t, tt.method, tt.path, tt.ctype, tt.body)
			v := s.Violations()
			s.ClearViolations()
			if tt.want == "" {
				if len(v) > 0 {
					t.Fatalf("violations: %q", v)
				}
				return
			}
			if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), tt.want) {
				t.Fatalf("violations %q, want one about %q", v, tt.want)
			}
		})
	}
}

// TestCleanupFailsTest: a violation left at the end fails the test.
func TestCleanupFailsTest(t *testing.T) {
	var inner fakeTB
	t.Run("inner", func(t *testing.T) {
		inner.T = t
		s := New(&inner, Options{})
		s.send(t, "GET", "/v3/services/haproxy/no_such_thing", "", "")
	})
	if !inner.failed {
		t.Fatal("a violation did not fail the test")
	}
}

// fakeTB records Errorf instead of failing the test it wraps.
type fakeTB struct {
	*testing.T
	failed bool
}

func (f *fakeTB) Errorf(string, ...any) { f.failed = true }

func TestVersionAndReload(t *testing.T) {
	s := New(t, Options{})
	cfg, v := s.Config()
	if v != 1 || cfg != DefaultConfig {
		t.Fatalf("initial state %d %q", v, cfg)
	}
	if r := s.send(t, "POST", "/v3/services/haproxy/configuration/raw?version=7", "text/plain", cfg); r.StatusCode != http.StatusConflict {
		t.Fatalf("stale version: %s", r.Status)
	}
	r := s.send(t, "POST", "/v3/services/haproxy/configuration/raw?version=1", "text/plain", cfg)
	if r.StatusCode != http.StatusAccepted || r.Header.Get("Reload-ID") == "" {
		t.Fatalf("post: %s %v", r.Status, r.Header)
	}
	id := r.Header.Get("Reload-ID")
	if c := s.Counts(); c.Reloads != 1 || c.Conflicts != 1 || c.ConfigWrites != 1 {
		t.Fatalf("counts %+v", c)
	}
	if got := s.Reloads(); len(got) != 1 || got[0].ID != id || got[0].Status != "succeeded" {
		t.Fatalf("reloads %+v", got)
	}
	if v := s.Violations(); len(v) > 0 {
		t.Fatalf("violations %q", v)
	}
}

// TestAddr: Servers on two loopback addresses share one port, and each
// answers on its own address.
func TestAddr(t *testing.T) {
	a := New(t, Options{Addr: "127.0.0.2:0", Config: DefaultConfig + "# a\n"})
	u, err := url.Parse(a.URL())
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "127.0.0.2" {
		t.Fatalf("URL %s, want host 127.0.0.2", a.URL())
	}
	b := New(t, Options{Addr: "127.0.0.3:" + u.Port(), Config: DefaultConfig + "# b\n"})
	if want := "http://127.0.0.3:" + u.Port(); b.URL() != want {
		t.Fatalf("URL %s, want %s", b.URL(), want)
	}
	for s, want := range map[*Server]string{a: "# a", b: "# b"} {
		req, err := http.NewRequestWithContext(t.Context(), "GET", s.URL()+"/v3/services/haproxy/configuration/raw", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth(s.User(), s.Password())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("%s answered %s %q (%v), want %q in it", s.URL(), resp.Status, body, err, want)
		}
	}
}
