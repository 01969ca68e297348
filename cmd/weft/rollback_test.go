package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
)

// TestRollbackThroughHAProxy runs weft on a real HAProxy (runtime driver)
// with the deployer on its own, so it can be restarted: three renders (a
// new host, then one HAProxy refuses) are listed by weft history with
// their verdicts and where they ran, weft diff shows the new host; through
// the NATS CLI, a rollback to the refused or an unknown version is refused
// with the reason and one to v1 makes HAProxy serve v1 again; an edit
// renders and validates v4, which neither a re-deploy trigger nor a
// deployer restart deploys; weft unpin does.
func TestRollbackThroughHAProxy(t *testing.T) {
	testkit.HAProxy(t)
	natsCLI := testkit.GoTool(t, "github.com/nats-io/natscli/nats")
	httpPort, backendPort := testkit.FreePort(t), testkit.FreePort(t)
	for _, e := range []struct{ addr, name string }{{"127.0.0.1", "web-1"}, {"127.0.0.2", "web-2"}, {"127.0.0.3", "api-1"}, {"127.0.0.5", "blog-1"}} {
		echo(t, net.JoinHostPort(e.addr, strconv.Itoa(backendPort)), e.name)
	}
	var others []host.Service
	for _, sv := range Services {
		if sv.Name != deployer.Service {
			others = append(others, sv)
		}
	}
	s := startStackOf(t, quickstart, func(d string) { onPorts(t, d, httpPort, backendPort) }, nil,
		func(d string) { runtimeQuickstart(t, d) }, others)
	startDeployer := func(replica string) func() {
		env := testkit.NewEnv(t, s.bus, replica)
		return testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, env.Env, s.cfg) })
	}
	stopDeployer := startDeployer("deployer-1")
	get := func(host string) string { return httpGet(httpPort, host, "/") }
	weft := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(append(args, "--nats-url", s.bus.URL), &out, &errOut); err != nil {
			t.Fatalf("weft %v: %v\n%s%s", args, err, out.String(), errOut.String())
		}
		return out.String()
	}
	nats := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, natsCLI, append([]string{"--server", s.bus.URL}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nats %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// deployed waits until the instance carried out more than n orders
	// and runs what the validation status last accepted (or, pinned, the
	// given version); it returns its status.
	deployed := func(n, pinned uint64) msg.DeployStatus {
		t.Helper()
		var st msg.DeployStatus
		waitFor(t, "deployed", func() error {
			tr := s.target("quickstart")
			if len(tr.Deploys) == 0 || tr.Validation == nil {
				return errNotYet
			}
			st = tr.Deploys[0]
			want := tr.Validation.LastGoodVersion
			if pinned != 0 {
				want = pinned
			}
			if st.Deploys <= n || st.Version != want {
				return fmt.Errorf("%d orders at v%d, want more than %d at v%d", st.Deploys, st.Version, n, want)
			}
			return nil
		})
		return st
	}
	// settled waits until every verdict was handled by the deployer.
	settled := func() {
		t.Helper()
		waitFor(t, "verdicts handled", func() error {
			c, err := s.bus.JS.Consumer(context.Background(), msg.StreamValidated, deployer.OrdersConsumer)
			if err != nil {
				return err
			}
			info, err := c.Info(context.Background())
			if err != nil {
				return err
			}
			if info.NumPending+uint64(info.NumAckPending) > 0 {
				return fmt.Errorf("%d verdicts pending, %d in flight", info.NumPending, info.NumAckPending)
			}
			return nil
		})
	}

	waitFor(t, "first deploy served", func() error { return contains(get("shop.example.com"), "200 web-") })
	v1 := deployed(0, 0).Version
	s.editManifest("shop.yaml", "    - host: checkout.example.com\n", "    - host: new.example.com\n      http:\n        paths:\n          - path: /\n            pathType: Prefix\n            backend:\n              service:\n                name: web\n                port:\n                  number: 80\n    - host: checkout.example.com\n")
	waitFor(t, "new host served", func() error { return contains(get("new.example.com"), "200 web-") })
	v2 := deployed(0, 0).Version
	s.editManifest("shop.yaml", "                name: api\n", "                name: api x\n")
	var v3 uint64
	waitFor(t, "refusal", func() error {
		if v := s.target("quickstart").Validation; v != nil && !v.OK {
			v3 = v.Version
			return nil
		}
		return errNotYet
	})

	// History: every version with its verdict; the deployed ones ran on
	// the instance.
	var h msg.HistoryReply
	waitFor(t, "history of three renders", func() error {
		h = msg.HistoryReply{}
		if err := json.Unmarshal([]byte(weft("history", "quickstart", "--json")), &h); err != nil {
			return err
		}
		byVersion := map[uint64]msg.HistoryEntry{}
		for _, e := range h.Entries {
			byVersion[e.Version] = e
		}
		e1, e2, e3 := byVersion[v1], byVersion[v2], byVersion[v3]
		if !e1.OK || !e2.OK || e3.OK || !strings.Contains(e3.Reason, "haproxy") || len(e1.Deployed) != 1 || len(e2.Deployed) != 1 || len(e3.Deployed) != 0 {
			return fmt.Errorf("v%d %+v\nv%d %+v\nv%d %+v", v1, e1, v2, e2, v3, e3)
		}
		return nil
	})
	text := weft("history", "quickstart")
	for _, want := range []string{fmt.Sprintf("v%d ", v3), "refused: ", fmt.Sprintf("v%d ", v1), "running on local", "last accepted"} {
		if !strings.Contains(text, want) {
			t.Errorf("weft history lacks %q:\n%s", want, text)
		}
	}
	diff := weft("diff", "quickstart", strconv.FormatUint(v1, 10), "v"+strconv.FormatUint(v2, 10))
	if !strings.Contains(diff, "# maps/hosts.map changed\n") || !strings.Contains(diff, "\n+new.example.com new.example.com\n") {
		t.Errorf("weft diff v%d v%d:\n%s", v1, v2, diff)
	}

	// Through the NATS CLI: refusals, then the rollback.
	for _, tc := range []struct{ to, want string }{
		{strconv.FormatUint(v3, 10), "was refused by validation"},
		{"999", "has no version 999"},
	} {
		if out := nats("req", msg.APIRollbackSubject("quickstart"), `{"to":"`+tc.to+`"}`); !strings.Contains(out, tc.want) || !strings.Contains(out, msg.SchemaAPIError) {
			t.Errorf("rollback to %s answered:\n%s", tc.to, out)
		}
	}
	var out, errOut bytes.Buffer
	err := run([]string{"rollback", "quickstart", "--to", strconv.FormatUint(v3, 10), "--nats-url", s.bus.URL}, &out, &errOut)
	if code, line := exitCode(err); code != ExitFailed || !strings.Contains(line, "was refused by validation") {
		t.Errorf("weft rollback to a refused bundle: exit %d, %q", code, line)
	}
	before := deployed(0, 0).Deploys
	if out := nats("req", msg.APIRollbackSubject("quickstart"), fmt.Sprintf(`{"to":"%d","by":"nats-cli"}`, v1)); !strings.Contains(out, msg.SchemaRollbackReply) {
		t.Fatalf("rollback answered:\n%s", out)
	}
	deployed(before, v1)
	waitFor(t, "v1 served again", func() error {
		if got := get("new.example.com"); strings.HasPrefix(got, "200 web-") {
			return fmt.Errorf("new.example.com answered %q", got)
		}
		return contains(get("shop.example.com"), "200 web-")
	})
	// weft status exits ExitFailing: v3's refusal is the last verdict.
	var status, statusErr bytes.Buffer
	if err := run([]string{"status", "--nats-url", s.bus.URL}, &status, &statusErr); err != nil && !strings.Contains(statusErr.String(), "failing: quickstart: validation of v") {
		t.Fatalf("weft status: %v\n%s", err, statusErr.String())
	}
	if st := status.String(); !strings.Contains(st, "PINNED") || !strings.Contains(st, fmt.Sprintf("quickstart  v%d", v1)) || !strings.Contains(st, "nats-cli") {
		t.Errorf("weft status does not show the pin:\n%s", st)
	}

	// v4 is rendered and accepted, and not deployed: not by its verdict,
	// a trigger, nor a restarted deployer.
	s.editManifest("shop.yaml", "                name: api x\n", "                name: api\n")
	var v4 uint64
	waitFor(t, "v4 accepted", func() error {
		if v := s.target("quickstart").Validation; v != nil && v.OK && v.LastGoodVersion > v3 {
			v4 = v.LastGoodVersion
			return nil
		}
		return errNotYet
	})
	settled()
	before = deployed(0, v1).Deploys
	nats("req", msg.TriggerDeploySubject("quickstart"), "")
	deployed(before, v1)
	if got := get("new.example.com"); strings.HasPrefix(got, "200 web-") {
		t.Fatalf("v%d served while pinned on v%d: %q", v4, v1, got)
	}
	stopDeployer()
	before = deployed(0, v1).Deploys
	startDeployer("deployer-2")
	deployed(before, v1)
	if got := get("new.example.com"); strings.HasPrefix(got, "200 web-") {
		t.Fatalf("v%d served after a restart while pinned on v%d: %q", v4, v1, got)
	}

	if out := weft("unpin", "quickstart"); !strings.Contains(out, fmt.Sprintf("unpinned (was v%d); deploying v%d", v1, v4)) {
		t.Errorf("weft unpin said:\n%s", out)
	}
	waitFor(t, "v4 served", func() error { return contains(get("new.example.com"), "200 web-") })
	if st := deployed(0, 0); st.Version != v4 {
		t.Fatalf("deployed v%d after unpin, want v%d", st.Version, v4)
	}
}
