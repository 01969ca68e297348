package watcher_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// TestConsulValuesStored runs the watcher on a consul source: a KV value
// and a catalog service's instances land in the resources bucket as
// values, the instances as a list whose port is a number, as templates
// range over them.
func TestConsulValuesStored(t *testing.T) {
	srv := testkit.StartConsul(t)
	srv.MustDo(t, "PUT", "/v1/kv/app/port", []byte("8080"))
	srv.MustDo(t, "PUT", "/v1/agent/service/register", []byte(`{"ID":"web-1","Name":"web","Address":"10.0.0.1","Port":8080,"Tags":["blue"]}`))
	f := newFixture(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
sources:
  - name: catalog
    type: consul
    address: %s
    prefix: /app
    services: [web]
targets: {}
`, srv.Addr)), f.dir)
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	_, stop := f.start("w1")
	defer stop()

	kvKey := msg.ResourceKey("catalog", config.ValuesType, "", "/port")
	svcKey := msg.ResourceKey("catalog", config.ValuesType, "", "service:web")
	testkit.Eventually(t, 30*time.Second, func() error {
		r, err := f.resource(kvKey)
		if err != nil {
			return fmt.Errorf("%s: %w", kvKey, err)
		}
		if r.Object["value"] != "8080" {
			return fmt.Errorf("%s: value %v", kvKey, r.Object["value"])
		}
		r, err = f.resource(svcKey)
		if err != nil {
			return fmt.Errorf("%s: %w", svcKey, err)
		}
		insts, ok := r.Object["value"].([]any)
		if !ok || len(insts) != 1 {
			return fmt.Errorf("%s: value %v, want one instance", svcKey, r.Object["value"])
		}
		inst, _ := insts[0].(map[string]any)
		port, isNumber := inst["port"].(float64)
		if inst["id"] != "web-1" || inst["address"] != "10.0.0.1" || !isNumber || port != 8080 {
			return fmt.Errorf("%s: instance %#v", svcKey, inst)
		}
		return nil
	})

	srv.MustDo(t, "PUT", "/v1/agent/service/deregister/web-1", nil)
	testkit.Eventually(t, 30*time.Second, func() error {
		r, err := f.resource(svcKey)
		if err != nil {
			return err
		}
		if insts, ok := r.Object["value"].([]any); !ok || len(insts) != 0 {
			return fmt.Errorf("%s: value %v, want no instance", svcKey, r.Object["value"])
		}
		return nil
	})
}
