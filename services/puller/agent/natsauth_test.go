package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/agent"
)

// TestAgentOnItsOwnUser: on a real nats-server with the users weft
// nats-config generates, an agent connected as the puller-agent role
// takes its node's order, records the outcome and publishes it, and the
// server refuses nothing it does.
func TestAgentOnItsOwnUser(t *testing.T) {
	keys := t.TempDir()
	users, err := natsauth.NKeyUsers(keys, msg.Roles())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := natsauth.ServerConfig(users)
	if err != nil {
		t.Fatal(err)
	}
	srv := testkit.NATSServer(t, conf)
	connect := func(role msg.Role) *testkit.Bus {
		opts, err := natsauth.Client{NKey: natsauth.SeedFile(keys, role)}.Options()
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(srv.URL, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return &testkit.Bus{NC: nc, JS: js, URL: srv.URL}
	}
	admin := connect(msg.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := msg.Provision(ctx, admin.JS, 1); err != nil {
		t.Fatal(err)
	}
	r := newRigOn(t, admin, connect(msg.RolePullerAgent), func(o *agent.Options) { o.QueueRetry = time.Hour })
	plain := r.open.PushPlain(t, "shop/web", "1.0")
	o := r.order(t, plain.Ref, time.Minute)
	if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled || p.ImageRef != plain.ID {
		t.Fatalf("outcome %+v, want pulled %s", p, plain.ID)
	}
	if st := r.status(t, o); st.Phase != msg.PullPulled {
		t.Fatalf("status %+v", st)
	}
	// An order waiting for a full limit is woken by the watch of the
	// slots, which its user may read: nothing else would look again
	// within the hour.
	held := holdSlot(t, admin, "another-pull", slots.Limit{Scope: msg.ClusterSlotScope, N: 1})
	api := r.open.PushPlain(t, "shop/api", "1.0")
	waiting := r.orderWith(t, api.Ref, 5*time.Minute, msg.PullLimits{Cluster: 1})
	testkit.Eventually(t, time.Minute, func() error {
		if q := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_queued_pulls"); q != 1 {
			return fmt.Errorf("queued pulls %v, want 1", q)
		}
		return nil
	})
	held.Release()
	if p := r.pulled(t, waiting); p.Outcome != msg.PullOutcomePulled || p.ImageRef != api.ID {
		t.Fatalf("outcome %+v, want pulled %s once the slot was freed", p, api.ID)
	}
	if log := srv.LogText(); strings.Contains(log, "Violation") {
		t.Fatalf("the server refused the agent:\n%s", log)
	}
}
