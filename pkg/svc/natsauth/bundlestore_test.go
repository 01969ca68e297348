package natsauth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// TestBundleStoreByRole: with the generated users, each role does what it
// does with the bundle store: the renderer stores a bundle, the validator
// loads it, the deployer loads, refreshes and deletes it, a configuration
// follower stores a candidate; the operator, which has no access to the
// store, cannot store one.
func TestBundleStoreByRole(t *testing.T) {
	s := testkit.NATSWithUsers(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := msg.Provision(ctx, s.Connect(t, msg.RoleProvisioner).JS, 1); err != nil {
		t.Fatal(err)
	}
	b, err := msg.NewBundle("edge", "/etc/haproxy", "haproxy.cfg", testkit.HAProxyBundle(300))
	if err != nil {
		t.Fatal(err)
	}
	renderer := msg.NewBundleStore(s.Connect(t, msg.RoleRenderer).JS)
	if err := renderer.PutBundle(ctx, "", b); err != nil {
		t.Fatalf("the renderer stores: %v", err)
	}
	validator := msg.NewBundleStore(s.Connect(t, msg.RoleValidator).JS)
	if got, err := validator.LoadBundle(ctx, b.Hash); err != nil || got.Hash != b.Hash {
		t.Fatalf("the validator loads: %v", err)
	}
	other, err := msg.NewBundle("edge", "/etc/haproxy", "haproxy.cfg", testkit.HAProxyBundle(3))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	if err := msg.NewBundleStore(s.Connect(t, msg.RoleOperator).JS).PutBundle(wctx, "", other); err == nil {
		t.Fatal("the operator stored a bundle")
	}
	deployer := msg.NewBundleStore(s.Connect(t, msg.RoleDeployer).JS)
	if _, err := deployer.LoadBundle(ctx, b.Hash); err != nil {
		t.Fatalf("the deployer loads: %v", err)
	}
	// A store that never read the bundle does not know where its chunks
	// are and writes them again: the deployer may.
	if wrote, err := msg.NewBundleStore(s.Connect(t, msg.RoleDeployer).JS).Refresh(ctx, b.Hash, time.Now()); err != nil || !wrote {
		t.Fatalf("the deployer refreshes: wrote %v, %v", wrote, err)
	}
	cfg := msg.Config{Hash: "c1", YAML: "targets: {}\n"}
	if err := msg.NewBundleStore(s.Connect(t, msg.RoleWatcher).JS).PutConfig(ctx, cfg); err != nil {
		t.Fatalf("a configuration follower stores a candidate: %v", err)
	}
	if c, err := validator.LoadConfig(ctx, "c1"); err != nil || c.YAML != cfg.YAML {
		t.Fatalf("the validator loads the candidate: %v", err)
	}
	if err := deployer.Delete(ctx, b.Hash); err != nil {
		t.Fatalf("the deployer deletes: %v", err)
	}
	if _, err := validator.LoadBundle(ctx, b.Hash); !errors.Is(err, msg.ErrNotStored) {
		t.Fatalf("after delete: %v, want ErrNotStored", err)
	}
}
