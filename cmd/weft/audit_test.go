package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftio/weft/cmd/weft/internal/audit"
	"github.com/weftio/weft/pkg/msg"
)

// at is a stable time for golden output: t0 plus ms milliseconds.
func at(ms int) time.Time {
	return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

const (
	hashA = "3f2a1b9c0d12e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9"
	hashB = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
	trace = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// timeline is a story of one target: an edit, its render, verdict and
// deploy; a render failure; a refused bundle; a dead letter; a trigger.
func timeline() []audit.Event {
	counts := map[string]int{"endpoints": 3, "ingresses": 2, "services": 3}
	return []audit.Event{
		{At: at(0), Kind: audit.KindSync, Subject: "weft.sync.manifests.endpoints", Stream: msg.StreamChanges, Seq: 3,
			Sync: &msg.Sync{Source: "manifests", Type: "endpoints", Count: 3, Revision: 8, Errors: []string{"blog.yaml: line 3: mapping values are not allowed here"}}},
		{At: at(1000), Kind: audit.KindChange, Subject: "weft.change.manifests.endpoints", Stream: msg.StreamChanges, Seq: 9, TraceID: trace,
			Change: &msg.Change{Source: "manifests", Type: "endpoints", Key: "manifests.endpoints.default.web", Op: msg.OpPut, Namespace: "default", Name: "web", Revision: 42, ObservedAt: at(990)}},
		{At: at(1120), Kind: audit.KindRender, Subject: "weft.render.quickstart", Stream: msg.StreamRenders, Seq: 4, TraceID: trace,
			Render: &msg.Render{Target: "quickstart", Version: 3, BundleHash: hashA, Files: []msg.FileRef{{Path: "haproxy.cfg", Kind: "config", Size: 2048, Hash: hashB[:16]}, {Path: "maps/host.map", Kind: "map", Size: 120, Hash: hashA[:16]}}, At: at(1120),
				Provenance: msg.Provenance{StateRevision: 42, Counts: counts, Cause: "weft.change.manifests.endpoints",
					Changed: []msg.ObjectChange{{Type: "endpoints", Namespace: "default", Name: "web", Op: msg.OpPut, Revision: 42, Fields: []string{"endpoints", "metadata.generation"}}}}}},
		{At: at(1180), Kind: audit.KindVerdict, Subject: "weft.validated.quickstart", Stream: msg.StreamValidated, Seq: 4,
			Verdict: &msg.Validated{Target: "quickstart", Version: 3, BundleHash: hashA, OK: true, Replies: []msg.ValidateReply{
				{Kind: "haproxy", OK: true, Duration: 41200 * time.Microsecond}, {Kind: "template", OK: true, Duration: 350 * time.Microsecond}}}},
		{At: at(1190), Kind: audit.KindDeploy, Subject: "weft.deploy.quickstart.local", Stream: msg.StreamDeploys, Seq: 11, TraceID: trace,
			Order: &msg.DeployOrder{Target: "quickstart", Instance: "local", Version: 3, BundleHash: hashA, Reason: msg.OrderValidated}},
		{At: at(1310), Kind: audit.KindDeployed, Subject: "weft.deployed.quickstart.local", Stream: msg.StreamDeploys, Seq: 12, OrderSeq: 11,
			Deployed: &msg.Deployed{Target: "quickstart", Instance: "local", Version: 3, BundleHash: hashA, Driver: "runtime", Outcome: msg.OutcomeApplied,
				RuntimeOps: []string{"set server be_default_web_http/web-2 addr 127.0.0.9 port 8080"}, Duration: 120 * time.Millisecond}},
		{At: at(2000), Kind: audit.KindRender, Subject: "weft.render.quickstart", Stream: msg.StreamRenders, Seq: 5,
			Render: &msg.Render{Target: "quickstart", Version: 4, Failure: &msg.TemplateError{Template: "haproxy.cfg", Line: 12, Message: "unknown filter 'uper'"},
				Provenance: msg.Provenance{StateRevision: 43, Counts: counts, Cause: "weft.change.manifests.ingresses"}}},
		{At: at(3000), Kind: audit.KindVerdict, Subject: "weft.validated.quickstart", Stream: msg.StreamValidated, Seq: 5,
			Verdict: &msg.Validated{Target: "quickstart", Version: 5, BundleHash: hashB, Reason: "haproxy refused the bundle", Cached: true, Missing: []string{"syntax"},
				Replies: []msg.ValidateReply{{Kind: "haproxy", Duration: 38 * time.Millisecond, Problems: []msg.Problem{
					{File: "haproxy.cfg", Line: 31, Message: "unknown keyword 'bogus-directive' in 'frontend' section"},
					{File: "haproxy.cfg", Line: 2, Severity: "warning", Message: "missing timeouts"}}},
					{Kind: "template", Error: "bundle unreadable", Duration: 2 * time.Millisecond}}}},
		{At: at(3500), Kind: audit.KindDeployed, Subject: "weft.deployed.quickstart.edge-2", Stream: msg.StreamDeploys, Seq: 14, OrderSeq: 13,
			Deployed: &msg.Deployed{Target: "quickstart", Instance: "edge-2", Version: 3, BundleHash: hashA, Driver: "files", Outcome: msg.OutcomeFailed,
				Error: "reload_cmd: exit status 1", Attempt: 2, Duration: 3 * time.Second}},
		{At: at(3600), Kind: audit.KindDeployed, Subject: "weft.deployed.quickstart.edge-3", Stream: msg.StreamDeploys, Seq: 15, OrderSeq: 13,
			Deployed: &msg.Deployed{Target: "quickstart", Instance: "edge-3", Version: 3, BundleHash: hashA, Driver: "files", Outcome: msg.OutcomeApplied,
				Reloaded: true, ReloadReason: "new backend be_default_web_8000", Written: []string{"haproxy.cfg", "maps/host.map"}, Removed: []string{"maps/old.map"}, Duration: 80 * time.Millisecond}},
		{At: at(4000), Kind: audit.KindDeadLetter, Subject: "weft.dlq.validator", Stream: msg.StreamDLQ, Seq: 1,
			DeadLetter: &msg.DeadLetter{Service: "validator", Subject: "weft.render.quickstart", Stream: msg.StreamRenders, Sequence: 6, Reason: "decode weft.render.v1: malformed", Size: 27}},
		{At: at(4500), Kind: audit.KindUnreadable, Subject: "weft.render.quickstart", Stream: msg.StreamRenders, Seq: 6, Error: "decode weft.render.v1: malformed"},
		{At: at(5000), Kind: audit.KindTrigger, Subject: "weft.trigger.render.quickstart", Trigger: &audit.Trigger{What: "render", Name: "quickstart", Reason: "audit", By: "ops"}},
		{At: at(5010), Kind: audit.KindRender, Subject: "weft.render.quickstart", Stream: msg.StreamRenders, Seq: 7,
			Render: &msg.Render{Target: "quickstart", Version: 6, BundleHash: hashA, Files: []msg.FileRef{{Path: "haproxy.cfg", Kind: "config", Size: 2048, Hash: hashB[:16]}},
				Provenance: msg.Provenance{StateRevision: 43, Cause: "trigger", Trigger: &msg.Trigger{Reason: "audit", By: "ops"}}}},
	}
}

// chains are `weft why` stories: a runtime change with its fields, and
// one whose render and changes aged out.
func chains() map[string]audit.Chain {
	ev := timeline()
	prev := audit.Event{At: at(500), Kind: audit.KindRender, Subject: "weft.render.quickstart", Stream: msg.StreamRenders, Seq: 3,
		Render: &msg.Render{Target: "quickstart", Version: 2, BundleHash: hashB, Provenance: msg.Provenance{StateRevision: 40, Cause: "start"}}}
	other := audit.Event{At: at(900), Kind: audit.KindChange, Subject: "weft.change.manifests.services", Stream: msg.StreamChanges, Seq: 8,
		Change: &msg.Change{Source: "manifests", Type: "services", Op: msg.OpDelete, Namespace: "default", Name: "old", Revision: 41}}
	status := msg.DeployStatus{Target: "quickstart", Instance: "local", Driver: "runtime", Version: 3, BundleHash: hashA, At: at(1310)}
	full := audit.Explain(status, []audit.Event{prev, ev[2], ev[3], ev[4], ev[5]})
	full.AddChanges([]audit.Event{other, ev[1]})
	aged := audit.Explain(msg.DeployStatus{Target: "quickstart", Instance: "edge-3", Driver: "files", Version: 3, BundleHash: hashA, At: at(3600), LastError: "reload_cmd: exit status 1"},
		[]audit.Event{ev[9]})
	return map[string]audit.Chain{"why-runtime": full, "why-aged-out": aged}
}

func TestAuditGolden(t *testing.T) {
	tests := []struct {
		name string
		out  func(*bytes.Buffer) error
	}{
		{"timeline", func(b *bytes.Buffer) error {
			for _, e := range timeline() {
				if err := audit.Write(b, e); err != nil {
					return err
				}
			}
			return nil
		}},
		{"timeline-json", func(b *bytes.Buffer) error {
			for _, e := range timeline()[1:3] {
				if err := audit.WriteJSON(b, e); err != nil {
					return err
				}
			}
			return nil
		}},
		{"why-runtime", func(b *bytes.Buffer) error { return audit.WriteChain(b, chains()["why-runtime"]) }},
		{"why-aged-out", func(b *bytes.Buffer) error { return audit.WriteChain(b, chains()["why-aged-out"]) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.out(&b); err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", "audit", tc.name+".golden"), b.Bytes())
		})
	}
}

// TestAuditJSONIsStable: every line of --json decodes back to the event.
func TestAuditJSONIsStable(t *testing.T) {
	for _, e := range timeline() {
		var b bytes.Buffer
		if err := audit.WriteJSON(&b, e); err != nil {
			t.Fatal(err)
		}
		if bytes.Count(b.Bytes(), []byte("\n")) != 1 {
			t.Fatalf("%s: not one line: %s", e.Kind, b.String())
		}
		var back audit.Event
		if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Kind != e.Kind || !back.At.Equal(e.At) {
			t.Fatalf("%s: %v, decoded %+v", e.Kind, err, back)
		}
	}
}

func TestWhyChain(t *testing.T) {
	c := chains()
	full := c["why-runtime"]
	if full.Err() != nil || full.Order == nil || full.Order.Seq != 11 || full.Previous == nil || full.Previous.Render.Version != 2 ||
		len(full.Changes) != 2 || full.Changes[1].Change.Name != "web" {
		t.Fatalf("chain %+v, err %v", full, full.Err())
	}
	if from, to := full.ChangeWindow(); from != 40 || to != 42 {
		t.Fatalf("window (%d, %d]", from, to)
	}
	if c["why-aged-out"].Err() == nil {
		t.Fatal("a chain without its render is complete")
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func TestAuditFilter(t *testing.T) {
	ev := timeline()
	other := audit.Event{Kind: audit.KindRender, Subject: "weft.render.blog", Render: &msg.Render{Target: "blog", Version: 1, BundleHash: hashA}}
	otherDLQ := audit.Event{Kind: audit.KindDeadLetter, DeadLetter: &msg.DeadLetter{Service: "deployer", Subject: "weft.deploy.blog.a", Reason: "x"}}
	resync := audit.Event{Kind: audit.KindTrigger, Subject: "weft.trigger.resync.manifests", Trigger: &audit.Trigger{What: "resync", Name: "manifests"}}
	otherTrigger := audit.Event{Kind: audit.KindTrigger, Subject: "weft.trigger.deploy.blog", Trigger: &audit.Trigger{What: "deploy", Name: "blog"}}
	valuesChange := audit.Event{Kind: audit.KindChange, Change: &msg.Change{Source: "kv", Type: "values", Name: "x", Op: msg.OpPut, Revision: 1}}
	tests := []struct {
		name   string
		filter audit.Filter
		event  audit.Event
		want   bool
	}{
		{"no target: everything", audit.Filter{}, other, true},
		{"its render", audit.Filter{Target: "quickstart"}, ev[2], true},
		{"its failed render", audit.Filter{Target: "quickstart"}, ev[6], true},
		{"its verdict", audit.Filter{Target: "quickstart"}, ev[3], true},
		{"its order", audit.Filter{Target: "quickstart"}, ev[4], true},
		{"its outcome", audit.Filter{Target: "quickstart"}, ev[5], true},
		{"a dead letter of its render", audit.Filter{Target: "quickstart"}, ev[10], true},
		{"its unreadable render", audit.Filter{Target: "quickstart"}, ev[11], true},
		{"its trigger", audit.Filter{Target: "quickstart"}, ev[12], true},
		{"another target's render", audit.Filter{Target: "quickstart"}, other, false},
		{"another target's dead letter", audit.Filter{Target: "quickstart"}, otherDLQ, false},
		{"another target's trigger", audit.Filter{Target: "quickstart"}, otherTrigger, false},
		{"a resync concerns every target", audit.Filter{Target: "quickstart"}, resync, true},
		{"types unknown: every change", audit.Filter{Target: "quickstart"}, ev[1], true},
		{"a type it reads", audit.Filter{Target: "quickstart", Types: map[string]bool{"endpoints": true}}, ev[1], true},
		{"a type it does not read", audit.Filter{Target: "quickstart", Types: map[string]bool{"services": true}}, ev[1], false},
		{"a sync of a type it does not read", audit.Filter{Target: "quickstart", Types: map[string]bool{"services": true}}, ev[0], false},
		{"values it may read", audit.Filter{Target: "quickstart", Types: map[string]bool{"values": true}}, valuesChange, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.filter.Match(tc.event); got != tc.want {
				t.Fatalf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}
