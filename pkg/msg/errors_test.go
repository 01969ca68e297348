package msg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		action msg.Action
		delay  time.Duration
	}{
		{"nil", nil, msg.Ack, 0},
		{"permanent", msg.Permanent(errors.New("bad template")), msg.Term, 0},
		{"wrapped permanent", fmt.Errorf("render: %w", msg.Permanent(errors.New("x"))), msg.Term, 0},
		{"decode error", fmt.Errorf("handle: %w", msg.ErrMalformed), msg.Term, 0},
		{"retry", msg.Retry(errors.New("kv busy"), 5*time.Second), msg.Nak, 5 * time.Second},
		{"unclassified", context.DeadlineExceeded, msg.Nak, msg.DefaultRetryDelay},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := msg.Classify(tc.err)
			if d.Action != tc.action || d.Delay != tc.delay {
				t.Fatalf("Classify(%v) = %+v, want %v/%v", tc.err, d, tc.action, tc.delay)
			}
			if tc.err != nil && d.Reason == "" {
				t.Fatal("no reason")
			}
		})
	}
	if msg.Permanent(nil) != nil || msg.Retry(nil, time.Second) != nil {
		t.Fatal("wrapping nil must stay nil")
	}
}

func TestKeys(t *testing.T) {
	cases := []struct{ ns, name, want string }{
		{"default", "web", "src.ing.default.web"},
		{"", "cluster-thing", "src.ing._.cluster-thing"},
		{"default", "api.example.com", "src.ing.default.api=2Eexample=2Ecom"},
		{"kube_sys", "a:b", "src.ing.kube=5Fsys.a=3Ab"},
	}
	for _, tc := range cases {
		k := msg.ResourceKey("src", "ing", tc.ns, tc.name)
		if k != tc.want {
			t.Errorf("ResourceKey(%q,%q) = %q, want %q", tc.ns, tc.name, k, tc.want)
		}
		s, ty, ns, n, err := msg.ParseResourceKey(k)
		if err != nil || s != "src" || ty != "ing" || ns != tc.ns || n != tc.name {
			t.Errorf("ParseResourceKey(%q) = %q %q %q %q %v", k, s, ty, ns, n, err)
		}
	}
	for _, bad := range []string{"a.b.c", "a.b.c.d=4", "a.b.c.=ZZ"} {
		if _, _, _, _, err := msg.ParseResourceKey(bad); err == nil {
			t.Errorf("ParseResourceKey(%q) accepted", bad)
		}
	}
}

func TestValidToken(t *testing.T) {
	for _, ok := range []string{"haproxy", "edge-1", "a_b"} {
		if err := msg.ValidToken(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", ">", "a b", "a\tb"} {
		if err := msg.ValidToken(bad); !errors.Is(err, msg.ErrBadToken) {
			t.Errorf("%q accepted: %v", bad, err)
		}
	}
}

// TestUnconfirmedDelays: a message the recorded state does not confirm yet
// is retried soon after it was stored (the write that confirms it follows
// within milliseconds), later the older it is, and dead-lettered once it
// is older than ConfirmWait.
func TestUnconfirmedDelays(t *testing.T) {
	tests := []struct {
		age       time.Duration
		action    msg.Action
		wantDelay time.Duration
	}{
		{0, msg.Nak, 5 * time.Millisecond},
		{2 * time.Millisecond, msg.Nak, 5 * time.Millisecond},
		{40 * time.Millisecond, msg.Nak, 40 * time.Millisecond},
		{3 * time.Second, msg.Nak, 3 * time.Second},
		{msg.ConfirmWait, msg.Nak, msg.ConfirmWait},
		{msg.ConfirmWait + time.Millisecond, msg.Term, 0},
	}
	for _, tt := range tests {
		err := msg.Unconfirmed(tt.age, "render %s v%d", "t", 1)
		if !errors.Is(err, msg.ErrUnconfirmed) {
			t.Errorf("age %s: %v is not ErrUnconfirmed", tt.age, err)
		}
		d := msg.Classify(err)
		if d.Action != tt.action || d.Delay != tt.wantDelay {
			t.Errorf("age %s: decision %v delay %s, want %v delay %s", tt.age, d.Action, d.Delay, tt.action, tt.wantDelay)
		}
	}
}
