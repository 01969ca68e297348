package slots_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
)

// BenchmarkAcquireRelease is one piece of work taking a slot of each of
// the puller's three limits (cluster 10, node 2, registry 4) and freeing
// them, on an embedded NATS server; BenchmarkKVPut, a plain Put of the
// leases bucket in the same run, is the reference.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, bc := range []struct {
		name   string
		limits []slots.Limit
	}{
		{"one limit", []slots.Limit{{Scope: msg.ClusterSlotScope, N: 10}}},
		{"three limits", []slots.Limit{
			{Scope: msg.ClusterSlotScope, N: 10},
			{Scope: msg.NodeSlotScope("worker-1"), N: 2},
			{Scope: msg.RegistrySlotScope("registry.example.com"), N: 4},
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			kv, js := leases(b)
			s := newSlots(b, kv, js)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				h, err := s.Acquire(ctx, fmt.Sprintf("pull-%d", i), bc.limits...)
				if err != nil {
					b.Fatal(err)
				}
				h.Release()
				i++
			}
		})
	}
}

func BenchmarkKVPut(b *testing.B) {
	kv, _ := leases(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := kv.Put(ctx, "bench.put", []byte("pull-0")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireFull is the cost of learning that a limit of 10 is full:
// every slot is tried and its holder read.
func BenchmarkAcquireFull(b *testing.B) {
	kv, js := leases(b)
	s := newSlots(b, kv, js)
	ctx := context.Background()
	l := slots.Limit{Scope: msg.ClusterSlotScope, N: 10}
	for i := range l.N {
		h, err := s.Acquire(ctx, fmt.Sprintf("holder-%d", i), l)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.Release)
	}
	for b.Loop() {
		if _, err := s.Acquire(ctx, "late", l); !errors.Is(err, slots.ErrFull) {
			b.Fatalf("Acquire = %v, want ErrFull", err)
		}
	}
}
