package validator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
)

func kindsOf(v msg.Validated) []string {
	var out []string
	for _, r := range v.Replies {
		out = append(out, r.Kind)
	}
	return out
}

// TestRegisteredKinds splits the kinds between two replicas and expects
// whatever has a live heartbeat: a kind whose replica died is waited for
// until its heartbeat expires, and a replica that stops cleanly takes its
// kinds with it at once.
func TestRegisteredKinds(t *testing.T) {
	const yaml = `
targets:
  edge:
    base: /etc/haproxy
    validate: {expect: registered, timeout: 1s}
    deploy: {driver: files, dest: /tmp/unused}
    haproxy_config: {template: "unused"}
`
	ttl := 1500 * time.Millisecond
	f, stops := startWith(t, yaml,
		validator.Options{Kinds: []string{"template"}, HeartbeatTTL: ttl},
		validator.Options{Kinds: []string{"haproxy", "syntax"}, HeartbeatTTL: ttl})
	n := 0
	next := func() msg.Bundle { n++; return bundle(t, goodCfg, strings.Repeat("a b\n", n)) }

	// The replicas' first heartbeats race the first render: expect all
	// three kinds once they are in.
	testkit.Eventually(t, 10*time.Second, func() error {
		if v := f.submit(next()); !v.OK || !slices.Equal(kindsOf(v), []string{"haproxy", "syntax", "template"}) {
			return fmt.Errorf("both replicas: ok=%v kinds=%v (%s)", v.OK, kindsOf(v), v.Reason)
		}
		return nil
	})

	// A replica serving policy wrote one heartbeat and died: its kind is
	// expected until the heartbeat expires, so the verdict waits (the
	// kinds are asked again), never refuses, and comes once the dead
	// replica's kind is no longer expected.
	leases, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketLeases)
	undecided := map[string]string{"target": "edge", "verdict": "undecided"}
	testkit.Eventually(t, 20*time.Second, func() error {
		before := f.sum("weft_validator_verdicts_total", undecided)
		data, _ := msg.Encode(msg.Heartbeat{Kind: "policy", Replica: "gone.example", At: time.Now()})
		if _, err := leases.Put(context.Background(), msg.KindHeartbeatKey("policy", "gone.example"), data); err != nil {
			t.Fatal(err)
		}
		if v := f.submit(next()); !v.OK || len(v.Missing) > 0 || slices.Contains(kindsOf(v), "policy") {
			t.Fatalf("after the dead replica's heartbeat expired: ok=%v missing=%v kinds=%v (%s)", v.OK, v.Missing, kindsOf(v), v.Reason)
		}
		if f.sum("weft_validator_verdicts_total", undecided) == before {
			return errors.New("the dead replica's kind was not waited for (its heartbeat not yet seen)")
		}
		return nil
	})

	stops[1]()
	testkit.Eventually(t, 10*time.Second, func() error {
		if v := f.submit(next()); !v.OK || !slices.Equal(kindsOf(v), []string{"template"}) {
			return fmt.Errorf("after a clean stop: ok=%v kinds=%v (%s)", v.OK, kindsOf(v), v.Reason)
		}
		return nil
	})
}

// TestMinKinds accepts a bundle that enough kinds accepted while one kind
// has no replica, names the missing kind, and still refuses what an
// answering kind refuses.
func TestMinKinds(t *testing.T) {
	const yaml = `
targets:
  edge:
    base: /etc/haproxy
    validate: {kinds: [haproxy, syntax, template], min_kinds: 2, timeout: 1s}
    deploy: {driver: files, dest: /tmp/unused}
    haproxy_config: {template: "unused"}
`
	f, _ := startWith(t, yaml, validator.Options{Kinds: []string{"haproxy", "template"}})
	v := f.submit(bundle(t, goodCfg, "a b\n"))
	if !v.OK || !slices.Equal(v.Missing, []string{"syntax"}) || !strings.Contains(v.Reason, "minimum") {
		t.Fatalf("two of three kinds: ok=%v missing=%v (%s)", v.OK, v.Missing, v.Reason)
	}
	v = f.submit(bundle(t, strings.Replace(goodCfg, "maxconn 100", "frobnicate yes", 1), "a b\n"))
	if v.OK || !strings.Contains(v.Reason, "haproxy refused") {
		t.Fatalf("refused by haproxy: ok=%v (%s)", v.OK, v.Reason)
	}
}

func TestOptionsRejectUnknownKinds(t *testing.T) {
	env := testkit.NewEnv(t, testkit.NATS(t), "v1")
	o := validator.Options{Kinds: []string{"telepathy"}}
	err := o.Run(context.Background(), env.Env, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown kind "telepathy"`) {
		t.Fatalf("err = %v", err)
	}
}
