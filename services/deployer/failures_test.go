package deployer_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
)

// block puts a regular file where the fixture's deploy folder goes, so
// that no deploy can be carried out until unblock removes it.
func (f *fixture) block() {
	f.t.Helper()
	if err := os.RemoveAll(f.dest); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(f.dest, []byte("in the way\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) unblock() {
	f.t.Helper()
	if err := os.Remove(f.dest); err != nil {
		f.t.Fatal(err)
	}
}

// outcomes returns every deploy outcome of edge/local so far.
func (f *fixture) outcomes() []msg.Deployed {
	f.t.Helper()
	ctx := context.Background()
	c, err := f.bus.JS.OrderedConsumer(ctx, msg.StreamDeploys, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{msg.DeployedSubject("edge", "local")},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []msg.Deployed
	for range info.NumPending {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			f.t.Fatal(err)
		}
		var d msg.Deployed
		if err := msg.Decode(m.Data(), &d); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// deployStatus reads the status of edge/local.
func (f *fixture) deployStatus() msg.DeployStatus {
	f.t.Helper()
	kv, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	var st msg.DeployStatus
	if _, err := msg.LoadStatus(context.Background(), kv, msg.DeployStatusKey("edge", "local"), &st); err != nil {
		f.t.Fatal(err)
	}
	return st
}

func failedOutcomes(ds []msg.Deployed) []msg.Deployed {
	var out []msg.Deployed
	for _, d := range ds {
		if d.Outcome == msg.OutcomeFailed {
			out = append(out, d)
		}
	}
	return out
}

// TestFailingDeployIsReportedAndRetried: a deploy that cannot be carried
// out (the deploy folder cannot be made) is an ERROR log, a failed outcome
// with the error, the instance's status and the failed-deploys metric, is
// reported once however often it fails, and is retried (well past the 20
// deliveries that used to drop it) until it is carried out.
func TestFailingDeployIsReportedAndRetried(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	b := f.store("global # one\n")
	f.block()
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})

	testkit.Eventually(t, 15*time.Second, func() error {
		if st := f.deployStatus(); st.Failures < 25 || st.LastError == "" {
			return fmt.Errorf("status %+v: want 25 failed attempts and the error", st)
		}
		return nil
	})
	st := f.deployStatus()
	if st.Version != 0 || st.BundleHash != "" || !strings.Contains(st.LastError, "not a directory") {
		t.Errorf("status of a failing deploy = %+v, want nothing deployed and the error", st)
	}
	failed := failedOutcomes(f.outcomes())
	if len(failed) != 1 {
		t.Fatalf("failed outcomes = %+v, want one for the whole streak", failed)
	}
	if d := failed[0]; d.Version != 1 || d.BundleHash != b.Hash || d.Attempt != 1 || !strings.Contains(d.Error, "not a directory") {
		t.Errorf("failed outcome = %+v", d)
	}
	if n := testkit.LabeledValue(t, f.env.Registry, "weft_deployer_deploys_total", map[string]string{"deploy_instance": "local", "outcome": msg.OutcomeFailed}); n < 25 {
		t.Errorf("failed deploys metric = %v, want every failed attempt", n)
	}
	if n := strings.Count(f.env.Logs.String(), `"level":"ERROR","msg":"deploy failed; retrying"`); n != 1 {
		t.Errorf("%d ERROR logs of the failure, want one per streak:\n%s", n, f.env.Logs.String())
	}
	for _, name := range []string{deployer.InstanceConsumer("edge", "local"), deployer.OrdersConsumer} {
		stream := msg.StreamDeploys
		if name == deployer.OrdersConsumer {
			stream = msg.StreamValidated
		}
		c, err := f.bus.JS.Consumer(ctx, stream, name)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := c.Info(ctx); err != nil || info.Config.MaxDeliver != -1 {
			t.Errorf("consumer %s: %+v %v, want no MaxDeliver", name, info.Config, err)
		}
	}

	f.unblock()
	d := f.outcome(2)
	if d.Outcome != msg.OutcomeApplied || f.file("haproxy.cfg") != "global # one\n" || f.reloads() != 1 {
		t.Fatalf("after the folder can be made: outcome %+v, haproxy.cfg %q, %d reloads", d, f.file("haproxy.cfg"), f.reloads())
	}
	// The outcome is published before the status is written and the
	// streak's end logged.
	testkit.Eventually(t, 15*time.Second, func() error {
		if st := f.deployStatus(); st.Version != 1 || st.LastError != "" || st.Failures != 0 {
			return fmt.Errorf("status after the deploy = %+v, want version 1 and no error", st)
		}
		if !strings.Contains(f.env.Logs.String(), "deploy succeeded after failing") {
			return errors.New("the end of the failure streak is not logged")
		}
		return nil
	})
}

// TestNewerOrderSupersedesFailingOne: while an order fails, a newer one
// for the instance takes over (the failing order does not block it), and
// once deploys work again only the newer bundle is delivered.
func TestNewerOrderSupersedesFailingOne(t *testing.T) {
	f := start(t)
	b1, b2 := f.store("global # one\n"), f.store("global # two\n")
	f.block()
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b1.Hash, OK: true})
	testkit.Eventually(t, 15*time.Second, func() error {
		if len(failedOutcomes(f.outcomes())) == 0 {
			return errors.New("no failed outcome yet")
		}
		return nil
	})
	f.verdict(msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: true})
	// The newer order fails too, which only its delivery can show.
	testkit.Eventually(t, 15*time.Second, func() error {
		for _, d := range failedOutcomes(f.outcomes()) {
			if d.Version == 2 {
				return nil
			}
		}
		return errors.New("the newer order was not tried")
	})
	// The failing order ends when the newer one comes: seen on the
	// subject while waiting, or, at its next attempt, as an order for a
	// bundle older than the last accepted (skipped).
	if logs := f.env.Logs.String(); !strings.Contains(logs, "failing order superseded by a newer one") && !strings.Contains(logs, "order for an older bundle skipped") {
		t.Error("superseding not logged")
	}
	f.unblock()
	testkit.Eventually(t, 15*time.Second, func() error {
		if st := f.deployStatus(); st.Version != 2 || st.LastError != "" {
			return fmt.Errorf("status %+v, want version 2 without an error", st)
		}
		return nil
	})
	for _, d := range f.outcomes() {
		if d.Version == 1 && d.Outcome != msg.OutcomeFailed && d.Outcome != msg.OutcomeSkipped {
			t.Errorf("the superseded order was carried out: %+v", d)
		}
	}
	if f.file("haproxy.cfg") != "global # two\n" || f.reloads() != 1 {
		t.Errorf("haproxy.cfg %q after %d reloads, want the newer bundle in one", f.file("haproxy.cfg"), f.reloads())
	}
}

// TestFailureReminders: a failure that lasts is reported again (ERROR log
// and failed outcome) every reminder interval, not on every attempt.
func TestFailureReminders(t *testing.T) {
	first, max, reminder := deployer.SetRetry(5*time.Millisecond, 20*time.Millisecond, 300*time.Millisecond)
	t.Cleanup(func() { deployer.SetRetry(first, max, reminder) }) // after the deployer stops
	f := start(t)
	b := f.store("global # one\n")
	f.block()
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})
	testkit.Eventually(t, 15*time.Second, func() error {
		if n := len(failedOutcomes(f.outcomes())); n < 3 {
			return fmt.Errorf("%d failed outcomes, want a first report and two reminders", n)
		}
		return nil
	})
	failed := failedOutcomes(f.outcomes())
	st := f.deployStatus()
	if st.Failures < 3*uint64(len(failed)) {
		t.Errorf("%d failed attempts reported %d times, want far fewer reports than attempts", st.Failures, len(failed))
	}
	for i := 1; i < len(failed); i++ {
		if failed[i].Attempt <= failed[i-1].Attempt || failed[i].At.Sub(failed[i-1].At) < 300*time.Millisecond {
			t.Errorf("reports %+v and %+v: want a reminder interval apart", failed[i-1], failed[i])
		}
	}
	if n := strings.Count(f.env.Logs.String(), `"level":"ERROR","msg":"deploy failed; retrying"`); n < 3 {
		t.Errorf("%d ERROR logs, want the first report and the reminders", n)
	}
}
