package watcher_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

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

// TestZookeeperValuesStored runs the watcher on a zookeeper source: a
// znode's data lands in the resources bucket as a value, and follows it.
func TestZookeeperValuesStored(t *testing.T) {
	srv := testkit.StartZooKeeper(t)
	conn, _, err := zk.Connect([]string{srv.Addr}, 10*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The client connects in the background: a request before that fails.
	testkit.Eventually(t, 30*time.Second, func() error {
		_, err := conn.Multi(
			&zk.CreateRequest{Path: "/app", Acl: zk.WorldACL(zk.PermAll)},
			&zk.CreateRequest{Path: "/app/port", Data: []byte("8080"), Acl: zk.WorldACL(zk.PermAll)})
		if errors.Is(err, zk.ErrNodeExists) {
			return nil // an earlier try went through
		}
		return err
	})
	f := newFixture(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
sources:
  - name: zk
    type: zookeeper
    endpoints: [%s]
    prefix: /app
targets: {}
`, srv.Addr)), f.dir)
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	_, stop := f.start("w1")
	defer stop()
	key := msg.ResourceKey("zk", config.ValuesType, "", "/port")
	wait := func(want string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() error {
			r, err := f.resource(key)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if r.Object["value"] != want || r.Object["key"] != "/app/port" {
				return fmt.Errorf("%s: %v", key, r.Object)
			}
			return nil
		})
	}
	wait("8080")
	if _, err := conn.Set("/app/port", []byte("9090"), -1); err != nil {
		t.Fatal(err)
	}
	wait("9090")
}
