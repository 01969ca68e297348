package liveconfig_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/liveconfig"
	"github.com/weftio/weft/pkg/testkit"
)

const candidate = `sources:
  - name: manifests
    type: manifests
    path: /tmp
watched_resources:
  services:
    api_version: v1
    kind: Service
targets:
  t:
    haproxy_config:
      template: "global\n"
    deploy:
      driver: files
      dest: /tmp/out
`

// templateKind answers the configuration requests as the validator's
// template kind does (the message contract: one reply on the request's
// reply subject), saying it could not decide the first undecided times.
func templateKind(t *testing.T, nc *nats.Conn, undecided int32) *atomic.Int32 {
	t.Helper()
	var asked atomic.Int32
	sub, err := nc.QueueSubscribe(msg.ValidateSubject(msg.ConfigTarget), "kind."+config.KindTemplate, func(m *nats.Msg) {
		n := asked.Add(1)
		reply := msg.ValidateReply{Kind: config.KindTemplate, OK: true}
		if n <= undecided {
			reply = msg.ValidateReply{Kind: config.KindTemplate, Error: "read configuration: context canceled"}
		}
		out, err := msg.NewMsg(m.Reply, "", reply)
		if err != nil {
			t.Error(err)
			return
		}
		_ = m.RespondMsg(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &asked
}

// TestUndecidedIsAskedAgain: an answer that is no verdict (a validator
// stopping, a candidate it could not read yet) does not reject a good
// configuration; it is asked again, and only an answer that stays
// undecided is reported, as what the kind said.
func TestUndecidedIsAskedAgain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		undecided int32
		wantOK    bool
		wantAsked int32
	}{
		{"decided at once", 0, true, 1},
		{"undecided twice", 2, true, 3},
		{"never decided", 100, false, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testkit.NATS(t)
			env := testkit.NewEnv(t, b, "t")
			asked := templateKind(t, b.NC, tc.undecided)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := liveconfig.Check(ctx, env.Env, candidate, "test", "", 5*time.Second)
			if st.OK != tc.wantOK {
				t.Fatalf("OK = %v, want %v (err %v, problems %v)", st.OK, tc.wantOK, err, st.Problems)
			}
			if got := asked.Load(); got != tc.wantAsked {
				t.Fatalf("asked %d times, want %d", got, tc.wantAsked)
			}
			if tc.wantOK {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, liveconfig.ErrRejected) {
				t.Fatalf("err = %v, want a rejection", err)
			}
			if len(st.Problems) != 1 || !strings.Contains(st.Problems[0].Message, "could not decide: read configuration: context canceled") {
				t.Fatalf("problems = %v, want the kind's own words", st.Problems)
			}
		})
	}
}

// TestCandidateStoredOnce: processes checking the same text store it once:
// one description, and chunks stored by content, none of them twice.
func TestCandidateStoredOnce(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "t")
	templateKind(t, b.NC, 0)
	ctx := context.Background()
	stream, err := b.JS.Stream(ctx, msg.ObjectStream(msg.ObjectBundles))
	if err != nil {
		t.Fatal(err)
	}
	hash := liveconfig.Hash(candidate)
	for i := range 3 {
		if _, err := liveconfig.Check(ctx, env.Env, candidate, "test", "", 5*time.Second); err != nil {
			t.Fatal(err)
		}
		c, err := msg.NewBundleStore(b.JS).LoadConfig(ctx, hash)
		if err != nil || c.YAML != candidate {
			t.Fatalf("check %d: stored candidate %q, %v", i+1, c.YAML, err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("$O."+msg.ObjectBundles+".>"))
		if err != nil {
			t.Fatal(err)
		}
		for subj, n := range info.State.Subjects {
			if n != 1 {
				t.Fatalf("check %d: %d messages on %s", i+1, n, subj)
			}
		}
		if info.State.Subjects[msg.StoredSubject(msg.ConfigObject(hash))] != 1 {
			t.Fatalf("check %d: no description of the candidate in %v", i+1, info.State.Subjects)
		}
	}
}
