package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/liveconfig"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator"
)

// TestFollowFile follows a copy of the quickstart's weft.yaml with the
// real validator: each way of changing it (written in place, renamed over,
// removed and written again, a signal) yields the new configuration once;
// a broken one is rejected with an ERROR record and a status verdict, and
// yields nothing.
func TestFollowFile(t *testing.T) {
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "f")
	testkit.Run(t, func(ctx context.Context) error { return validator.Run(ctx, env.Env, loadQuickstart(t)) })
	dir := t.TempDir()
	path := filepath.Join(dir, "weft.yaml")
	good := readFile(filepath.Join(quickstart, "weft.yaml"))
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reload := make(chan os.Signal, 1)
	configs, err := liveconfig.FollowFile(ctx, env.Env, liveconfig.File{Path: path, Running: liveconfig.Hash(good), Reload: reload, Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	variant := func(s string) string { return strings.Replace(good, `string "no route"`, `string "`+s+`"`, 1) }
	next := func(t *testing.T, want string) {
		t.Helper()
		select {
		case c := <-configs:
			if c.Dir != dir || !strings.Contains(c.Targets["quickstart"].HAProxyConfig.Template, want) {
				t.Fatalf("yielded a configuration without %q (dir %s)", want, c.Dir)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no configuration with %q yielded", want)
		}
	}
	none := func(t *testing.T) {
		t.Helper()
		select {
		case c := <-configs:
			t.Fatalf("yielded %s", c.Hash)
		case <-time.After(time.Second):
		}
	}
	write := func(t *testing.T, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T)
		want   string // in the template; empty: nothing yielded
	}{
		{"written in place", func(t *testing.T) { write(t, variant("in place")) }, "in place"},
		{"renamed over", func(t *testing.T) {
			tmp := filepath.Join(dir, "weft.yaml.new")
			if err := os.WriteFile(tmp, []byte(variant("renamed")), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, "renamed"},
		{"removed", func(t *testing.T) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"written again", func(t *testing.T) { write(t, variant("again")) }, "again"},
		{"signal, unchanged", func(t *testing.T) { reload <- syscall.SIGHUP }, ""},
		{"another file of the folder", func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "other.yaml"), []byte("x: ["), 0o644); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"broken", func(t *testing.T) { write(t, variant("{% for %}")) }, ""},
		{"signal after a good edit", func(t *testing.T) {
			// The signal reads it at once; the watch, once the change
			// settles, finds it unchanged.
			write(t, variant("signalled"))
			reload <- syscall.SIGHUP
		}, "signalled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.change(t)
			if tc.want == "" {
				none(t)
				return
			}
			next(t, tc.want)
		})
	}
	var rejected bool
	for l := range strings.Lines(env.Logs.String()) {
		rejected = rejected || strings.Contains(l, `"level":"ERROR","msg":"configuration rejected; the running one stays"`)
		if strings.Contains(l, `"level":"ERROR"`) && !strings.Contains(l, "configuration rejected") {
			t.Errorf("unexpected ERROR record: %s", l)
		}
	}
	if !rejected {
		t.Error("no ERROR record of the broken configuration")
	}
	kv, err := b.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := msg.ReadStatus(ctx, kv)
	if err != nil || rep.Config == nil || !rep.Config.OK || rep.Config.Candidate != liveconfig.Hash(variant("signalled")) {
		t.Fatalf("status report config = %+v %v", rep.Config, err)
	}
	none(t)
}
