package slots_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
)

// A puller replica holds one slot of each limit while it pulls an image
// onto a node, shows the slots it holds in a gauge, and stops the pull if
// a slot is lost.
func Example() {
	var js jetstream.JetStream // connected, weft's buckets provisioned
	reg := prometheus.NewRegistry()
	held := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weft_puller_slots_held", Help: "Slots this replica holds, per scope.",
	}, []string{"scope"})
	reg.MustRegister(held)

	ctx := context.Background()
	kv, err := js.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		log.Fatal(err)
	}
	s, err := slots.New(kv, js, slots.WithObserver(func(scope string, delta int) {
		held.WithLabelValues(scope).Add(float64(delta))
	}))
	if err != nil {
		log.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := s.Acquire(actx, "pull/shop/web/worker-1",
		slots.Limit{Scope: msg.ClusterSlotScope, N: 10},
		slots.Limit{Scope: msg.NodeSlotScope("worker-1"), N: 2},
		slots.Limit{Scope: msg.RegistrySlotScope("registry.example.com"), N: 4})
	var full *slots.FullError
	switch {
	case errors.As(err, &full):
		log.Printf("waiting: %s is at its limit of %d", full.Scope, full.N)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer h.Release()
	pulled := make(chan struct{}) // closed when the pull is over
	select {
	case <-pulled:
	case <-h.Lost():
		log.Printf("stop the pull: %v", h.Err())
	}
}
