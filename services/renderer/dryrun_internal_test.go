package renderer

import (
	"reflect"
	"testing"

	"github.com/weftio/weft/pkg/render/index"
)

// TestOverlay: the proposal is in place in the copy with it, whether it
// changes the stored object, adds one, or is the same as the stored one;
// a type that is not indexed is an error.
func TestOverlay(t *testing.T) {
	specs := []index.Spec{{Type: "services"}}
	svc := func(port int) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": "web"}, "spec": map[string]any{"port": port}}
	}
	tests := []struct {
		name    string
		p       proposal
		wantErr bool
	}{
		{"changed", proposal{typ: "services", key: "m.services.default.web", object: svc(81)}, false},
		{"same as stored", proposal{typ: "services", key: "m.services.default.web", object: svc(80)}, false},
		{"new", proposal{typ: "services", key: "m.services.default.api", object: svc(90)}, false},
		{"not indexed", proposal{typ: "pods", key: "m.pods.default.web", object: svc(80)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, err := index.New(specs)
			if err != nil {
				t.Fatal(err)
			}
			ix.Upsert("services", "m.services.default.web", 1, svc(80))
			r := &renderer{ix: ix, specs: specs}
			base, with, err := r.overlay(tt.p)
			if (err != nil) != tt.wantErr {
				t.Fatalf("overlay: %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got, _ := with.Store(tt.p.typ).Get(tt.p.key); !reflect.DeepEqual(got, tt.p.object) {
				t.Errorf("with holds %v, want %v", got, tt.p.object)
			}
			if got, _ := base.Store("services").Get("m.services.default.web"); !reflect.DeepEqual(got, svc(80)) {
				t.Errorf("base holds %v", got)
			}
		})
	}
}
