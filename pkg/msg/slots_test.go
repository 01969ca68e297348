package msg_test

import (
	"errors"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

func TestSlotKeys(t *testing.T) {
	tests := []struct {
		scope  string
		i      int
		key    string
		filter string
	}{
		{msg.ClusterSlotScope, 0, "slot.cluster.0", "slot.cluster.*"},
		{msg.NodeSlotScope("worker-1"), 1, "slot.node.worker-1.1", "slot.node.worker-1.*"},
		{msg.RegistrySlotScope("registry.example.com:5000"), 3, "slot.registry.registry=2Eexample=2Ecom=3A5000.3", "slot.registry.registry=2Eexample=2Ecom=3A5000.*"},
		{"node/a.b/c d", 12, "slot.node.a=2Eb.c=20d.12", "slot.node.a=2Eb.c=20d.*"},
	}
	for _, tc := range tests {
		t.Run(tc.scope, func(t *testing.T) {
			if err := msg.CheckSlotScope(tc.scope); err != nil {
				t.Fatal(err)
			}
			if got := msg.SlotKey(tc.scope, tc.i); got != tc.key {
				t.Fatalf("SlotKey = %q, want %q", got, tc.key)
			}
			if got := msg.SlotFilter(tc.scope); got != tc.filter {
				t.Fatalf("SlotFilter = %q, want %q", got, tc.filter)
			}
			scope, i, err := msg.ParseSlotKey(tc.key)
			if err != nil || scope != tc.scope || i != tc.i {
				t.Fatalf("ParseSlotKey(%q) = %q, %d, %v; want %q, %d", tc.key, scope, i, err, tc.scope, tc.i)
			}
		})
	}
}

func TestSlotKeyErrors(t *testing.T) {
	for _, scope := range []string{"", "/", "node/", "/node", "a//b"} {
		if err := msg.CheckSlotScope(scope); !errors.Is(err, msg.ErrInvalid) {
			t.Errorf("CheckSlotScope(%q) = %v, want ErrInvalid", scope, err)
		}
	}
	for _, key := range []string{"", "slot.", "slot.0", "slot.cluster", "slot.cluster.x", "slot.cluster.-1", "slot.a=Z.0", "render.web", "slot..0"} {
		if _, _, err := msg.ParseSlotKey(key); !errors.Is(err, msg.ErrInvalid) {
			t.Errorf("ParseSlotKey(%q) = %v, want ErrInvalid", key, err)
		}
	}
}
