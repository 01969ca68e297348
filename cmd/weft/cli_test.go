package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// runWeft runs weft's run with args and returns its exit code, stdout and
// stderr (including the line main prints).
func runWeft(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var so, se bytes.Buffer
	code, line := exitCode(run(args, &so, &se))
	if line != "" {
		se.WriteString(line + "\n")
	}
	return code, so.String(), se.String()
}

// TestHelpAndUsage asks every command for its usage: -h exits 0 with the
// usage on stdout and nothing on stderr; a wrong command line exits
// ExitUsage with the usage on stderr.
func TestHelpAndUsage(t *testing.T) {
	cases := []struct {
		args []string
		want string // on stdout
	}{
		{[]string{"-h"}, "usage: weft <command>"},
		{[]string{"--help"}, "usage: weft <command>"},
		{[]string{"help"}, "usage: weft <command>"},
		{[]string{"help", "status"}, "usage: weft status [flags]"},
		{[]string{"up", "-h"}, "usage: weft up [flags]"},
		{[]string{"up", "--help"}, "-nats-url"},
		{[]string{"render", "-h"}, "usage: weft render [flags]"},
		{[]string{"confd", "-h"}, "usage: weft confd [flags]"},
		{[]string{"help", "confd"}, "-onetime"},
		{[]string{"render", "-h"}, "-out"},
		{[]string{"validate", "-h"}, "usage: weft validate [flags] <bundle folder>"},
		{[]string{"status", "-h"}, "usage: weft status [flags]"},
		{[]string{"status", "-h"}, "Exits 3"},
		{[]string{"status", "-help"}, "-json"},
		{[]string{"status", "-h"}, "-nats-nkey"},
		{[]string{"up", "-h"}, "-nats-tls-ca"},
		{[]string{"up", "-h"}, "-provision"},
		{[]string{"up", "-h"}, "-nats-server-config"},
		{[]string{"nats-config", "-h"}, "usage: weft nats-config [flags]"},
		{[]string{"nats-config", "--permissions-only"}, "weft_renderer = {"},
		{[]string{"provision", "-h"}, "-nats-creds"},
		{[]string{"help", "audit"}, "usage: weft audit [flags]"},
		{[]string{"audit", "-h"}, "-follow"},
		{[]string{"why", "-h"}, "usage: weft why [flags] <target>"},
		{[]string{"history", "-h"}, "usage: weft history [flags] <target>"},
		{[]string{"diff", "-h"}, "usage: weft diff [flags] <target> <from> <to>"},
		{[]string{"rollback", "-h"}, "-to"},
		{[]string{"unpin", "-h"}, "usage: weft unpin [flags] <target>"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runWeft(t, tc.args...)
			if code != 0 || !strings.Contains(out, tc.want) || errOut != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and %q on stdout", code, out, errOut, tc.want)
			}
		})
	}
	bad := []struct {
		args []string
		want string // on stderr
	}{
		{nil, "usage: weft <command>"},
		{[]string{"frobnicate"}, `weft: unknown command "frobnicate"`},
		{[]string{"status", "--colour"}, "flag provided but not defined: -colour"},
		{[]string{"status", "--colour"}, "usage: weft status [flags]"},
		{[]string{"status", "extra"}, "status takes no arguments"},
		{[]string{"render", "--config", "x.yaml"}, "--out is required"},
		{[]string{"validate"}, "give one folder"},
		{[]string{"up", "--replicas", "many"}, "invalid value \"many\" for flag -replicas"},
		{[]string{"nats-config", "--roles", "root"}, "unknown NATS role"},
		{[]string{"status", "--nats-user", "u"}, "--nats-user and --nats-password go together"},
		{[]string{"provision", "--nats-tls-cert", "c.pem"}, "--nats-tls-cert and --nats-tls-key go together"},
		{[]string{"audit", "extra"}, "audit takes no arguments"},
		{[]string{"audit", "--since", "-1h"}, "--since must not be negative"},
		{[]string{"why"}, "why takes one target"},
		{[]string{"why", "a", "b"}, "why takes one target"},
		{[]string{"why", "a", "--instance"}, "flag needs an argument: -instance"},
		{[]string{"history"}, `weft history takes <target>, got []`},
		{[]string{"diff", "edge", "1"}, `weft diff takes <target> <from> <to>, got ["edge" "1"]`},
		{[]string{"rollback", "edge"}, "rollback needs --to <version|hash>"},
		{[]string{"unpin", "edge", "--colour"}, "flag provided but not defined: -colour"},
	}
	for _, tc := range bad {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runWeft(t, tc.args...)
			if code != ExitUsage || !strings.Contains(errOut, tc.want) || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and %q on stderr", code, out, errOut, ExitUsage, tc.want)
			}
		})
	}
}

// TestVersion prints the version set at build time, else the one the
// toolchain recorded, with the Go version.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runWeft(t, args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "weft ") || !strings.Contains(out, runtime.Version()) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	old := version
	t.Cleanup(func() { version = old })
	version = "v1.2.3"
	if _, out, _ := runWeft(t, "--version"); !strings.HasPrefix(out, "weft v1.2.3 (") {
		t.Fatalf("with version set: %q", out)
	}
}

// TestStatusExitCode runs `weft status` against a real NATS server whose
// status bucket holds good and failed records: it exits 0 only when no
// target's last render, validation or deploy failed, and names each failure.
func TestStatusExitCode(t *testing.T) {
	good := func() []msg.Message {
		return []msg.Message{
			msg.SyncStatus{Source: "m", Type: "services", Synced: true, Count: 94022},
			msg.RenderStatus{Target: "edge", Version: 4, BundleHash: "aaaaaaaaaaaaaaaa"},
			msg.ValidationStatus{Target: "edge", Version: 4, BundleHash: "aaaaaaaaaaaaaaaa", OK: true},
			msg.DeployStatus{Target: "edge", Instance: "a", Version: 4, BundleHash: "aaaaaaaaaaaaaaaa"},
			msg.DeployStatus{Target: "edge", Instance: "b", Version: 4, BundleHash: "aaaaaaaaaaaaaaaa"},
			msg.RenderStatus{Target: "api", Version: 2, BundleHash: "bbbbbbbbbbbbbbbb"},
		}
	}
	cases := []struct {
		name   string
		change func([]msg.Message) []msg.Message
		want   []string // failing lines on stderr, in order
	}{
		{"all good", func(m []msg.Message) []msg.Message { return m }, nil},
		{"render failed", func(m []msg.Message) []msg.Message {
			return append(m, msg.RenderStatus{Target: "api", Version: 3, BundleHash: "bbbbbbbbbbbbbbbb", LastError: "haproxy.cfg:3: unknown filter 'frob'"})
		}, []string{"failing: api: render v3 failed: haproxy.cfg:3: unknown filter 'frob'"}},
		{"validation refused", func(m []msg.Message) []msg.Message {
			return append(m, msg.ValidationStatus{Target: "edge", Version: 5, Reason: "haproxy refused"})
		}, []string{"failing: edge: validation of v5 refused: haproxy refused"}},
		{"one instance failed to deploy", func(m []msg.Message) []msg.Message {
			return append(m, msg.DeployStatus{Target: "edge", Instance: "b", Version: 4, LastError: "reload_cmd exited 1"})
		}, []string{"failing: edge: deploy to b failed: reload_cmd exited 1"}},
		{"everything failed", func(m []msg.Message) []msg.Message {
			return append(m,
				msg.RenderStatus{Target: "api", Version: 3, LastError: "boom"},
				msg.ValidationStatus{Target: "edge", Version: 5, Reason: "haproxy refused (1 problems; first: haproxy.cfg:3: unknown keyword)"},
				msg.ValidationStatus{Target: "web", Version: 2, Undecided: true, Reason: "undecided after 3 attempts, still asking: no answer from haproxy"},
				msg.DeployStatus{Target: "edge", Instance: "a", LastError: "dest is read-only"})
		}, []string{
			"failing: api: render v3 failed: boom",
			"failing: edge: validation of v5 refused: haproxy refused (1 problems; first: haproxy.cfg:3: unknown keyword)",
			"failing: edge: deploy to a failed: dest is read-only",
			"failing: web: validation of v2 undecided: undecided after 3 attempts, still asking: no answer from haproxy",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bus := testkit.NATS(t)
			ctx := context.Background()
			kv, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.change(good()) {
				var key string
				switch s := m.(type) {
				case msg.SyncStatus:
					key = msg.SyncStatusKey(s.Source, s.Type)
				case msg.RenderStatus:
					key = msg.RenderStatusKey(s.Target)
				case msg.ValidationStatus:
					key = msg.ValidationStatusKey(s.Target)
				case msg.DeployStatus:
					key = msg.DeployStatusKey(s.Target, s.Instance)
				}
				data, err := msg.Encode(m)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := kv.Put(ctx, key, data); err != nil {
					t.Fatal(err)
				}
			}
			wantCode := 0
			if len(tc.want) > 0 {
				wantCode = ExitFailing
			}
			for _, asJSON := range []bool{false, true} {
				args := []string{"status", "--nats-url", bus.URL}
				if asJSON {
					args = append(args, "--json")
				}
				code, out, errOut := runWeft(t, args...)
				got := strings.Split(strings.TrimSpace(errOut), "\n")
				if errOut == "" {
					got = nil
				}
				if code != wantCode || strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
					t.Fatalf("%v: exit %d, stderr:\n%s\nwant exit %d and:\n%s", args, code, errOut, wantCode, strings.Join(tc.want, "\n"))
				}
				if asJSON {
					var rep msg.StatusReport
					if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Syncs) != 1 || rep.Syncs[0].Count != 94022 {
						t.Fatalf("--json: %v %+v", err, rep)
					}
				} else if !strings.Contains(out, "94022") || !strings.Contains(out, "edge") {
					t.Fatalf("table:\n%s", out)
				}
			}
		})
	}
}

// TestStatusWithoutWeft fails with ExitFailed and says where it looked.
func TestStatusWithoutWeft(t *testing.T) {
	code, _, errOut := runWeft(t, "status", "--nats-url", "nats://127.0.0.1:1")
	if code != ExitFailed || !strings.Contains(errOut, "is weft running?") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestConfigProblemsOnStderr: a command given a weft.yaml with mistakes
// exits ExitFailed and prints each problem on a line of its own, with the
// file, line, column and field path.
func TestConfigProblemsOnStderr(t *testing.T) {
	p := filepath.Join(t.TempDir(), "weft.yaml")
	y := "targets:\n  edge:\n    render: {debounce: 5}\n    deploy:\n      driver: files\n      reload_cmnd: x\n"
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "weft: " + p + `:3:24: targets.edge.render.debounce: must be a duration like "250ms", "30s" or "1m30s", got 5 (a number needs a unit: 5s?)` + "\n" +
		"weft: " + p + `:6:7: targets.edge.deploy.reload_cmnd: unknown field "reload_cmnd"; did you mean "reload_cmd"?` + "\n"
	for _, args := range [][]string{
		{"render", "--config", p, "--out", t.TempDir()},
		{"validate", "--config", p, t.TempDir()},
	} {
		code, out, errOut := runWeft(t, args...)
		if code != ExitFailed || errOut != want || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr:\n%s\nwant exit %d and:\n%s", args, code, out, errOut, ExitFailed, want)
		}
	}
}

// TestStatusCountsFollowTheWatcher runs the watcher on the quickstart and
// reads `weft status --json` as Services are added and removed: the
// object count is the current one, not the initial listing's.
func TestStatusCountsFollowTheWatcher(t *testing.T) {
	s := startStackOf(t, quickstart, nil, nil, nil, Services[:1])
	count := func() (int, error) {
		code, out, errOut := runWeft(t, "status", "--json", "--nats-url", s.bus.URL)
		if code != 0 {
			return 0, fmt.Errorf("exit %d: %s", code, errOut)
		}
		var rep msg.StatusReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			return 0, err
		}
		for _, sy := range rep.Syncs {
			if sy.Source == "manifests" && sy.Type == "services" {
				return sy.Count, nil
			}
		}
		return 0, errors.New("no sync status of manifests services yet")
	}
	want := func(n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d services in weft status", n), func() error {
			got, err := count()
			if err == nil && got != n {
				err = fmt.Errorf("weft status counts %d services", got)
			}
			return err
		})
	}
	want(3)
	for i := range 60 {
		s.writeManifest(fmt.Sprintf("extra-%d.yaml", i), fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: extra-%d, namespace: default}\nspec: {ports: [{port: 80}]}\n", i))
	}
	want(63)
	for i := range 20 {
		if err := os.Remove(filepath.Join(s.dir, "manifests", fmt.Sprintf("extra-%d.yaml", i))); err != nil {
			t.Fatal(err)
		}
	}
	want(43)
}
