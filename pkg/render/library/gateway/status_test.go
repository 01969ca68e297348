package gateway_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/library/librarytest"
)

// status is files/gateway-status.json.
type status struct {
	GatewayClasses []struct {
		Name       string      `json:"name"`
		Conditions []condition `json:"conditions"`
	} `json:"gatewayClasses"`
	Gateways []struct {
		Namespace  string      `json:"namespace"`
		Name       string      `json:"name"`
		Conditions []condition `json:"conditions"`
		Listeners  []struct {
			Name           string      `json:"name"`
			AttachedRoutes int         `json:"attachedRoutes"`
			Conditions     []condition `json:"conditions"`
		} `json:"listeners"`
	} `json:"gateways"`
	HTTPRoutes []struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Parents   []struct {
			ParentRef struct {
				Namespace   string `json:"namespace"`
				Name        string `json:"name"`
				SectionName string `json:"sectionName"`
			} `json:"parentRef"`
			ControllerName string      `json:"controllerName"`
			Conditions     []condition `json:"conditions"`
		} `json:"parents"`
	} `json:"httpRoutes"`
}

type condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

func conditionOf(cs []condition, typ string) condition {
	for _, c := range cs {
		if c.Type == typ {
			return c
		}
	}
	return condition{}
}

// TestStatusAgreesWithRouting checks, for every fixture, that the status
// the library computes says what the routing does: a route with an
// accepted parent has match lines in haproxy.cfg and one without has
// none; a listener that is not programmed has no routes attached; a
// route whose backendRefs all resolve registered no backendRef error; the
// status is valid JSON with every condition's reason set.
func TestStatusAgreesWithRouting(t *testing.T) {
	res := watched(t)
	for _, f := range fixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			r := librarytest.Render(t, gatewayTarget(librarytest.GoldenBase, f.Options), librarytest.NewIndex(t, res, f.Objects))
			var st status
			if err := json.Unmarshal([]byte(librarytest.FileContent(r.Bundle, "files/gateway-status.json")), &st); err != nil {
				t.Fatalf("gateway-status.json: %v", err)
			}
			if len(st.GatewayClasses) == 0 {
				t.Error("no GatewayClass in the status")
			}
			cfg := librarytest.FileContent(r.Bundle, "haproxy.cfg")
			for _, rt := range st.HTTPRoutes {
				where := rt.Namespace + "/" + rt.Name
				accepted := false
				for _, p := range rt.Parents {
					for _, c := range p.Conditions {
						if c.Reason == "" || (c.Status != "True" && c.Status != "False") {
							t.Errorf("route %s: condition %+v", where, c)
						}
					}
					if conditionOf(p.Conditions, "Accepted").Status == "True" {
						accepted = true
					}
				}
				routed := strings.Contains(cfg, fmt.Sprintf("use_backend gw_%s_%s_r", rt.Namespace, rt.Name))
				if accepted != routed {
					t.Errorf("route %s: accepted %v in the status, routed %v in haproxy.cfg", where, accepted, routed)
				}
				refErrors := false
				for _, e := range r.Errors {
					if strings.HasSuffix(e.ID, "."+rt.Namespace+"."+rt.Name) && strings.Contains(e.Message, "backendRef") && strings.Contains(e.Message, "its requests get 500") {
						refErrors = true
					}
				}
				for _, p := range rt.Parents {
					if resolved := conditionOf(p.Conditions, "ResolvedRefs").Status == "True"; resolved == refErrors {
						t.Errorf("route %s: ResolvedRefs %v, backendRef errors registered %v", where, resolved, refErrors)
					}
				}
			}
			for _, g := range st.Gateways {
				for _, l := range g.Listeners {
					if conditionOf(l.Conditions, "Programmed").Status != "True" && l.AttachedRoutes > 0 {
						t.Errorf("gateway %s/%s listener %s: not programmed, %d routes attached", g.Namespace, g.Name, l.Name, l.AttachedRoutes)
					}
				}
			}
		})
	}
}
