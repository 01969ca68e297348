package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/cmd/weft/internal/audit"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
)

// publish publishes m on subject with the admin's connection.
func publish[T msg.Message](t *testing.T, js jetstream.JetStream, subject, id string, m T) uint64 {
	t.Helper()
	out, err := msg.NewMsg(subject, id, m)
	if err != nil {
		t.Fatal(err)
	}
	out.Header.Set(msg.HeaderTraceParent, "00-"+trace+"-00f067aa0ba902b7-01")
	ack, err := js.PublishMsg(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestAuditAsTheAuditor runs weft audit (history and --follow) and weft
// why with the auditor's user on a real nats-server whose users are the
// generated ones: the server refuses nothing they do, and no consumer is
// left on any stream afterwards.
func TestAuditAsTheAuditor(t *testing.T) {
	srv := testkit.NATSWithUsers(t, "")
	admin := srv.Connect(t, msg.RoleAdmin)
	ctx := context.Background()
	if err := msg.Provision(ctx, admin.JS, 1); err != nil {
		t.Fatal(err)
	}
	key := msg.ResourceKey("m", "services", "default", "web")
	publish(t, admin.JS, msg.ChangeSubject("m", "services"), "", msg.Change{Source: "m", Type: "services", Key: key, Op: msg.OpPut, Namespace: "default", Name: "web", Revision: 7})
	publish(t, admin.JS, msg.RenderSubject("edge"), "", msg.Render{Target: "edge", Version: 1, BundleHash: hashA,
		Provenance: msg.Provenance{StateRevision: 7, Cause: msg.ChangeSubject("m", "services")}})
	publish(t, admin.JS, msg.ValidatedSubject("edge"), "", msg.Validated{Target: "edge", Version: 1, BundleHash: hashA, OK: true,
		Replies: []msg.ValidateReply{{Kind: "haproxy", OK: true, Duration: 30 * time.Millisecond}}})
	order := publish(t, admin.JS, msg.DeploySubject("edge", "a"), "", msg.DeployOrder{Target: "edge", Instance: "a", Version: 1, BundleHash: hashA, Reason: msg.OrderValidated})
	publish(t, admin.JS, msg.DeployedSubject("edge", "a"), msg.DeployedID("edge", "a", order), msg.Deployed{Target: "edge", Instance: "a", Version: 1, BundleHash: hashA,
		Driver: "files", Outcome: msg.OutcomeApplied, Reloaded: true, ReloadReason: "initial"})
	publish(t, admin.JS, msg.DLQSubject("deployer"), "", msg.DeadLetter{Service: "deployer", Subject: msg.DeploySubject("edge", "b"), Reason: "unknown instance"})
	status, err := admin.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := msg.StoreStatus(ctx, status, msg.DeployStatusKey("edge", "a"), msg.DeployStatus{Target: "edge", Instance: "a", Driver: "files", Version: 1, BundleHash: hashA, Order: order}, 0); err != nil {
		t.Fatal(err)
	}

	auditor := []string{"--nats-url", srv.URL, "--nats-nkey", natsauth.SeedFile(srv.Keys, msg.RoleAuditor)}
	var out, errOut bytes.Buffer
	if err := run(append([]string{"audit", "--json", "--target", "edge"}, auditor...), &out, &errOut); err != nil {
		t.Fatalf("weft audit as the auditor: %v\n%s", err, errOut.String())
	}
	var kinds []string
	for _, e := range jsonEvents(t, out.String()) {
		kinds = append(kinds, string(e.Kind))
		if e.TraceID != trace && e.Kind != audit.KindDeadLetter {
			t.Errorf("%s: trace id %q", e.Kind, e.TraceID)
		}
	}
	if got := strings.Join(kinds, " "); got != "change render verdict deploy deployed dlq" {
		t.Fatalf("weft audit printed %q\n%s", got, out.String())
	}

	out.Reset()
	if err := run(append([]string{"why", "edge", "--instance", "a"}, auditor...), &out, &errOut); err != nil {
		t.Fatalf("weft why as the auditor: %v\n%s%s", err, out.String(), errOut.String())
	}
	if err := contains(out.String(), "m/services default/web put rev 7 [trace "+trace+"]"); err != nil {
		t.Fatalf("weft why: %v\n%s", err, out.String())
	}

	// An instance whose render aged out of the streams: said so, exit 1.
	if _, err := msg.StoreStatus(ctx, status, msg.DeployStatusKey("edge", "old"), msg.DeployStatus{Target: "edge", Instance: "old", Driver: "files", Version: 9, BundleHash: hashB}, 0); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code, line := exitCode(run(append([]string{"why", "edge", "--instance", "old"}, auditor...), &out, &errOut))
	if code != ExitFailed || !strings.Contains(line, "render v9 is no longer in WEFT_RENDERS") || !strings.Contains(out.String(), "edge/old runs v9") {
		t.Fatalf("weft why of an aged-out render: exit %d, %q\n%s", code, line, out.String())
	}

	// --follow sees what is published after it started, triggers too.
	followCtx, stop := context.WithCancel(ctx)
	var follow testkit.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- auditCmd(followCtx, append([]string{"--follow"}, auditor...), &follow, &follow) }()
	waitFor(t, "the history followed", func() error { return contains(follow.String(), "dlq ") })
	publish(t, admin.JS, msg.ChangeSubject("m", "services"), "", msg.Change{Source: "m", Type: "services", Key: key, Op: msg.OpDelete, Namespace: "default", Name: "web", Revision: 8})
	if err := admin.NC.Publish(msg.TriggerDeploySubject("edge"), []byte(`{"schema":"weft.trigger.v1","reason":"drift"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new change and the trigger followed", func() error {
		if err := contains(follow.String(), "m/services default/web delete rev 8"); err != nil {
			return err
		}
		return contains(follow.String(), "trigger    deploy edge (drift)")
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("weft audit --follow: %v", err)
	}

	if log := srv.LogText(); strings.Contains(log, "Violation") {
		t.Fatalf("the server refused what the auditor did:\n%s", log)
	}
	// Nothing left behind: every ordered consumer is gone.
	waitFor(t, "no consumer left", func() error {
		for _, name := range []string{msg.StreamChanges, msg.StreamRenders, msg.StreamValidated, msg.StreamDeploys, msg.StreamDLQ} {
			s, err := admin.JS.Stream(ctx, name)
			if err != nil {
				return err
			}
			info, err := s.Info(ctx)
			if err != nil {
				return err
			}
			if info.State.Consumers != 0 {
				return fmt.Errorf("%s has %d consumers", name, info.State.Consumers)
			}
		}
		return nil
	})
}
