package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/cmd/weft/internal/audit"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// rawAnnotation lets an Ingress annotation inject a line into HAProxy's
// frontend, so that a manifest edit can make a bundle haproxy refuses.
func rawAnnotation(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, "weft.yaml")
	y := readFile(p)
	edited := strings.Replace(y, "          default_backend be_not_found\n",
		"          default_backend be_not_found\n        {%- for _, i in resources.ingresses.items() %}\n          {{ i.metadata.annotations['weft.io/raw'] | default('') }}\n        {%- endfor %}\n", 1)
	if edited == y {
		t.Fatal("the quickstart's frontend changed; rawAnnotation needs its anchor")
	}
	if err := os.WriteFile(p, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
}

func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b := readFile(path)
	if !strings.Contains(b, old) {
		t.Fatalf("%s holds no %q", path, old)
	}
	if err := os.WriteFile(path+".tmp~", []byte(strings.Replace(b, old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp~", path); err != nil {
		t.Fatal(err)
	}
}

// jsonEvents decodes `weft audit --json` output.
func jsonEvents(t *testing.T, out string) []audit.Event {
	t.Helper()
	var evs []audit.Event
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e audit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("a line of --json does not decode: %v\n%s", err, sc.Text())
		}
		evs = append(evs, e)
	}
	return evs
}

// TestAuditAndWhyEndToEnd runs `weft up --demo` (embedded NATS, a real
// HAProxy, the runtime driver), follows `weft audit --follow` from the
// start, makes two edits (an address: a runtime change; an Ingress's port:
// a reload), a trigger, an edit haproxy refuses and a message the validator
// dead-letters; then `weft audit --target` and `weft why` tell that story.
func TestAuditAndWhyEndToEnd(t *testing.T) {
	testkit.HAProxy(t)
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	onPorts(t, dir, testkit.FreePort(t), testkit.FreePort(t))
	rawAnnotation(t, dir)
	addr := testkit.FreeAddr(t)
	url := "nats://" + addr
	startWeft(t, "up", "--demo", "--config", filepath.Join(dir, "weft.yaml"), "--nats-listen", addr, "--listen", "127.0.0.1:0")

	var nc *nats.Conn
	waitFor(t, "weft's NATS server", func() (err error) {
		nc, err = nats.Connect(url, nats.MaxReconnects(-1))
		return err
	})
	t.Cleanup(nc.Close)
	conn, err := audit.NewConn(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deployed := func(version uint64) msg.DeployStatus {
		t.Helper()
		var st msg.DeployStatus
		waitFor(t, fmt.Sprintf("v%d deployed", version), func() error {
			rep, err := readStatus(ctx, conn)
			if err != nil {
				return err
			}
			for _, tr := range rep.Targets {
				if tr.Target == "quickstart" && len(tr.Deploys) == 1 && tr.Deploys[0].Version >= version && tr.Deploys[0].LastError == "" {
					st = tr.Deploys[0]
					return nil
				}
			}
			return errNotYet
		})
		return st
	}
	first := deployed(1)

	// weft audit --follow from now on, as a person would run it.
	followCtx, stopFollow := context.WithCancel(ctx)
	var follow testkit.SyncBuffer
	followed := make(chan error, 1)
	go func() {
		followed <- auditCmd(followCtx, []string{"--nats-url", url, "--since", "0", "--follow", "--json"}, &follow, &follow)
	}()
	waitFor(t, "the followed history", func() error {
		for _, e := range jsonEvents(t, follow.String()) {
			if e.Kind == audit.KindDeployed && e.Deployed.Version == first.Version {
				return nil
			}
		}
		return errNotYet
	})

	// Edit 1: an address, which HAProxy takes at run time.
	editFile(t, filepath.Join(dir, "manifests", "endpoints.yaml"), `"127.0.0.2"`, `"127.0.0.9"`)
	second := deployed(first.Version + 1)
	if err := nc.Publish(msg.TriggerRenderSubject("quickstart"), []byte(`{"schema":"weft.trigger.v1","reason":"audit test","by":"e2e"}`)); err != nil {
		t.Fatal(err)
	}
	triggered := deployed(second.Version + 1)
	// Edit 2: the shop Ingress's port, a new backend: a reload.
	editFile(t, filepath.Join(dir, "manifests", "shop.yaml"), "number: 80\n", "number: 8000\n")
	third := deployed(triggered.Version + 1)
	// A bundle haproxy refuses, and a message the validator dead-letters.
	editFile(t, filepath.Join(dir, "manifests", "shop.yaml"), "  name: shop\n  namespace: default\n", "  name: shop\n  namespace: default\n  annotations:\n    weft.io/raw: bogus-directive on\n")
	if _, err := conn.JS.Publish(ctx, msg.RenderSubject("quickstart"), []byte(`{"schema":"weft.nonsense.v1"`)); err != nil {
		t.Fatal(err)
	}

	// The follower saw all of it as it happened.
	waitFor(t, "the follower sees the edits, the trigger, the refusal and the dead letter", func() error {
		var change, trigger, refused, dlq bool
		for _, e := range jsonEvents(t, follow.String()) {
			switch e.Kind {
			case audit.KindChange:
				change = change || (e.Change.Name == "shop" && e.Change.Type == "ingresses")
			case audit.KindTrigger:
				trigger = trigger || (e.Trigger.Name == "quickstart" && e.Trigger.Reason == "audit test")
			case audit.KindVerdict:
				refused = refused || !e.Verdict.OK
			case audit.KindDeadLetter:
				dlq = dlq || e.DeadLetter.Subject == msg.RenderSubject("quickstart")
			}
		}
		if !change || !trigger || !refused || !dlq {
			return fmt.Errorf("change %v, trigger %v, refusal %v, dead letter %v", change, trigger, refused, dlq)
		}
		return nil
	})
	stopFollow()
	if err := <-followed; err != nil {
		t.Fatalf("weft audit --follow ended with %v", err)
	}

	// weft audit --target, for people and for machines.
	var out, errOut bytes.Buffer
	if err := run([]string{"audit", "--nats-url", url, "--target", "quickstart", "--since", "1h"}, &out, &errOut); err != nil {
		t.Fatalf("weft audit: %v\n%s", err, errOut.String())
	}
	text := out.String()
	for _, want := range []string{
		"manifests/endpoints default/web-abc12 put rev",
		"manifests/ingresses default/shop put rev",
		fmt.Sprintf("render     quickstart v%d ", third.Version),
		"cause trigger (audit test, by e2e)",
		fmt.Sprintf("deployed   quickstart/%s v%d %s applied by runtime", third.Instance, third.Version, third.BundleHash[:12]),
		"reloaded: ",
		"runtime: set server ",
		"REFUSED: ",
		"bogus-directive",
		"haproxy refused in ",
		"dlq        validator gave up on weft.render.quickstart",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("weft audit --target quickstart lacks %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("weft audit --target quickstart:\n%s", text)
	}

	out.Reset()
	if err := run([]string{"audit", "--nats-url", url, "--target", "quickstart", "--json", "--since", "0"}, &out, &errOut); err != nil {
		t.Fatalf("weft audit --json: %v\n%s", err, errOut.String())
	}
	var shopRev uint64
	for _, e := range jsonEvents(t, out.String()) {
		if e.Kind == audit.KindRender && e.Render.Target != "quickstart" || e.Kind == audit.KindTrigger {
			t.Fatalf("--target quickstart printed %+v", e)
		}
		if e.Kind == audit.KindRender && e.Render.Version == third.Version {
			p := e.Render.Provenance
			if len(p.Changed) != 1 || p.Changed[0].Name != "shop" || p.Changed[0].Type != "ingresses" || strings.Join(p.Changed[0].Fields, ",") != "spec.rules" {
				t.Fatalf("render v%d changed %+v, want the shop Ingress's spec.rules", third.Version, p.Changed)
			}
			shopRev = p.Changed[0].Revision
		}
	}
	if shopRev == 0 {
		t.Fatalf("no render v%d in --json:\n%s", third.Version, out.String())
	}

	// weft why: what runs, back to the edit of the shop Ingress.
	out.Reset()
	if err := run([]string{"why", "quickstart", "--nats-url", url}, &out, &errOut); err != nil {
		t.Fatalf("weft why: %v\n%s%s", err, out.String(), errOut.String())
	}
	text = out.String()
	for _, want := range []string{
		fmt.Sprintf("quickstart/%s runs v%d %s (driver runtime)", third.Instance, third.Version, third.BundleHash[:12]),
		"applied by runtime",
		": validated [trace ",
		"reloaded: ",
		"haproxy accepted in ",
		"template accepted in ",
		fmt.Sprintf("v%d %s, cause weft.change.manifests.ingresses [trace ", third.Version, third.BundleHash[:12]),
		fmt.Sprintf("since v%d", triggered.Version),
		fmt.Sprintf("manifests/ingresses default/shop put rev %d: spec.rules [trace ", shopRev),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("weft why quickstart lacks %q", want)
		}
	}
	if strings.Contains(text, "endpoints default/web-abc12") {
		t.Error("weft why names the first edit, which an earlier render read")
	}
	if t.Failed() {
		t.Fatalf("weft why quickstart:\n%s", text)
	}
	t.Logf("weft why quickstart:\n%s", text)
	out.Reset()
	if err := run([]string{"why", "--json", "--instance", third.Instance, "--nats-url", url, "quickstart"}, &out, &errOut); err != nil {
		t.Fatalf("weft why --json: %v\n%s", err, errOut.String())
	}
	var c audit.Chain
	if err := json.Unmarshal(out.Bytes(), &c); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range c.Verdict.Verdict.Replies {
		kinds = append(kinds, r.Kind)
	}
	if c.Render.Render.Version != third.Version || len(c.Changes) != 1 || c.Changes[0].Change.Revision != shopRev ||
		c.Order.Order.Reason != msg.OrderValidated || strings.Join(kinds, ",") != "haproxy,template" && strings.Join(kinds, ",") != "template,haproxy" {
		t.Fatalf("weft why --json = %s", out.String())
	}

	// What does not exist is said so, with exit status 1.
	for _, args := range [][]string{
		{"why", "--nats-url", url, "no-such-target"},
		{"why", "--nats-url", url, "--instance", "no-such-instance", "quickstart"},
		{"audit", "--nats-url", url, "--target", "no-such-target"},
	} {
		code, line := exitCode(run(args, &out, &errOut))
		if code != ExitFailed || !strings.Contains(line, "no-such-") {
			t.Errorf("weft %s: exit %d, %q", strings.Join(args, " "), code, line)
		}
	}
}
