package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

// confdRun runs `weft confd args...` as its own process in dir (a copy of
// the confd example) until it exits, with its temporary files under a
// folder of its own, and returns its exit code, stdout and stderr; it
// fails the test when its NATS storage is left there afterwards.
func confdRun(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"confd"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), asWeft+"=1", "TMPDIR="+tmp, "WEFT_LOG_LEVEL="), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("weft confd: %v\n%s", err, stderr.String())
	}
	// Its NATS storage is a weft-confd-* folder there, removed at exit.
	left, _ := filepath.Glob(filepath.Join(tmp, "weft-confd-*"))
	if len(left) > 0 {
		t.Errorf("weft confd left its storage behind: %v", left)
	}
	return code, stdout.String(), stderr.String()
}

// assertConfdGolden checks the files the example deploys under dir/out
// against their golden files.
func assertConfdGolden(t *testing.T, dir string) {
	t.Helper()
	for golden, out := range confdFiles {
		got, err := os.ReadFile(filepath.Join(dir, "out", out))
		if err != nil {
			t.Error(err)
			continue
		}
		want, err := os.ReadFile(filepath.Join("testdata", "confd", golden))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s =\n%s\nwant\n%s", out, got, want)
		}
	}
}

// confdCopy copies the confd example into a new folder.
func confdCopy(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(confdExample)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestConfdOnetime: `weft confd -onetime` with confd's flags renders every
// resource of the confdir once from the file backend, runs its check and
// reload commands, writes where each dest says (relative to the working
// folder, as confd does) and exits 0, leaving no NATS storage behind; a
// resource whose check_cmd fails makes it exit 1 naming the resource and
// the command, and the file stays as it was.
func TestConfdOnetime(t *testing.T) {
	dir := confdCopy(t)
	// A file already there, of another mode than 0644: its resource sets
	// no mode, so confd keeps the file's.
	if err := os.MkdirAll(filepath.Join(dir, "out", "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "out", "app", "upstreams.conf"), []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	socket, states := notifySocket(t)
	code, _, stderr := confdRun(t, dir, []string{"NOTIFY_SOCKET=" + socket}, "-onetime", "-backend", "file", "-file", "values.yaml", "-confdir", "confdir", "-log-level", "warn")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	// A run that ends by itself is no service systemd waits for.
	select {
	case s := <-states:
		t.Errorf("-onetime notified systemd: %q", s)
	case <-time.After(500 * time.Millisecond):
	}
	assertConfdGolden(t, dir)
	// A resource's mode; without one, as confd: a file already there keeps
	// its mode, a new one gets 0644.
	for out, mode := range map[string]os.FileMode{"app/app.conf": 0o640, "app/upstreams.conf": 0o600, "cache/cache.json": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, "out", out))
		if err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", out, fi.Mode().Perm(), mode)
		}
	}
	reloads, err := os.ReadFile(filepath.Join(dir, "out", "reloads.log"))
	if err != nil || !strings.Contains(string(reloads), "app") {
		t.Errorf("reload_cmd did not run: %q, %v", reloads, err)
	}
	app := filepath.Join(dir, "out", "app", "app.conf")
	stage := filepath.Join(dir, "out", "app", ".app.conf.weft-stage")
	if _, err := os.Stat(stage); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("without -keep-stage-file the staged file was kept: %v", err)
	}

	// A value that check_cmd refuses: exit 1, the file unchanged; with
	// -keep-stage-file, the refused file is kept beside it, as confd does.
	editValues(t, dir, "port: 8080", "port: 80x80")
	code, _, stderr = confdRun(t, dir, nil, "-onetime", "-keep-stage-file", "-backend", "file", "-file", "values.yaml", "-confdir", "confdir", "-log-level", "error")
	if code != ExitFailed || !strings.Contains(stderr, "weft confd: "+app+": files: check_cmd failed") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	if got, _ := os.ReadFile(app); !strings.Contains(string(got), "port = 8080\n") {
		t.Errorf("a refused file was written:\n%s", got)
	}
	if got, err := os.ReadFile(stage); err != nil || !strings.Contains(string(got), "port = 80x80\n") {
		t.Errorf("-keep-stage-file kept %q (%v), want the refused file", got, err)
	}
	// A delivery with -keep-stage-file keeps the staged file too.
	editValues(t, dir, "port: 80x80", "port: 8181")
	if code, _, stderr = confdRun(t, dir, nil, "-onetime", "-keep-stage-file", "-backend", "file", "-file", "values.yaml", "-confdir", "confdir", "-log-level", "error"); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	deployed, _ := os.ReadFile(app)
	if got, err := os.ReadFile(stage); err != nil || !strings.Contains(string(deployed), "port = 8181\n") || string(got) != string(deployed) {
		t.Errorf("-keep-stage-file kept %q (%v), want the delivered file %q", got, err, deployed)
	}

	// A backend that cannot be read fails the pass at once, as in confd.
	code, _, stderr = confdRun(t, dir, nil, "-onetime", "-backend", "file", "-file", "absent.yaml", "-confdir", "confdir", "-log-level", "error")
	if code != ExitFailed || !strings.Contains(stderr, "weft confd: source file could not be read") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

// TestConfdOnetimeTemplateError: a template that fails to render (confd's
// "key does not exist") fails -onetime (exit 1) naming the resource and
// the error; the other resources are delivered.
func TestConfdOnetimeTemplateError(t *testing.T) {
	dir := confdCopy(t)
	toml := "[template]\nsrc = \"broken.conf.tmpl\"\ndest = \"out/broken.conf\"\nprefix = \"/myapp\"\nkeys = [\"/absent\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "confdir", "conf.d", "broken.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "confdir", "templates", "broken.conf.tmpl"), []byte("value = {{getv \"/absent\"}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := confdRun(t, dir, nil, "-onetime", "-backend", "file", "-file", "values.yaml", "-confdir", "confdir", "-log-level", "error")
	broken := filepath.Join(dir, "out", "broken.conf")
	if code != ExitFailed || !strings.Contains(stderr, "weft confd: "+broken+": render: ") || !strings.Contains(stderr, "key does not exist: /absent") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(broken); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a resource that did not render was written: %v", err)
	}
	assertConfdGolden(t, dir)
}

// TestConfdOnetimeNoop: -noop prints each resource's pending change as a
// unified diff and writes nothing, runs no command; -sync-only delivers
// without check_cmd and reload_cmd. Settings come from CONFD_* variables
// as from flags.
func TestConfdOnetimeNoop(t *testing.T) {
	dir := confdCopy(t)
	env := []string{"CONFD_BACKEND=file", "CONFD_FILE=values.yaml", "CONFD_CONFDIR=confdir", "CONFD_LOG_LEVEL=error"}
	code, stdout, stderr := confdRun(t, dir, env, "-onetime", "-noop")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	app := filepath.Join(dir, "out", "app", "app.conf")
	if !strings.Contains(stdout, app+" has pending changes\n--- "+app+"\n+++ "+app+" (rendered)\n") || !strings.Contains(stdout, "+port = 8080\n") {
		t.Errorf("stdout:\n%s", stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-noop wrote %v", err)
	}
	code, _, stderr = confdRun(t, dir, env, "-onetime", "-sync-only")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(app); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "reloads.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-sync-only ran reload_cmd: %v", err)
	}
	code, stdout, _ = confdRun(t, dir, env, "-onetime", "-noop", "-keep-stage-file")
	if code != 0 || stdout != "" {
		t.Errorf("nothing pending, but exit %d and\n%s", code, stdout)
	}
	staged, err := os.ReadFile(filepath.Join(dir, "out", "app", ".app.conf.weft-stage"))
	if deployed, _ := os.ReadFile(app); err != nil || string(staged) != string(deployed) {
		t.Errorf("-keep-stage-file kept %q (%v), want the rendered file", staged, err)
	}
}

// TestConfdCommandLine: flags weft cannot carry out are a usage error
// (exit 2) naming them; a confdir that cannot be read fails (exit 1)
// naming the flag.
func TestConfdCommandLine(t *testing.T) {
	dir := confdCopy(t)
	code, _, stderr := confdRun(t, dir, nil, "-backend", "dynamodb")
	if code != ExitUsage || !strings.Contains(stderr, `-backend "dynamodb" is not one weft reads`) {
		t.Errorf("exit %d\n%s", code, stderr)
	}
	code, _, stderr = confdRun(t, dir, nil, "-onetime", "-backend", "env", "-confdir", "absent")
	if code != ExitFailed || !strings.Contains(stderr, "-confdir: confdir "+filepath.Join(dir, "absent")+": ") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
	code, stdout, _ := confdRun(t, dir, nil, "-h")
	if code != 0 || !strings.Contains(stdout, "-onetime") {
		t.Errorf("-h: exit %d\n%s", code, stdout)
	}
}

// confdDaemon starts `weft confd args...` in dir (a copy of the confd
// example, whose out/app/upstreams.conf is already there with mode 0600)
// and waits for systemd's READY=1, every resource delivered.
func confdDaemon(t *testing.T, dir string, args ...string) *weftProcess {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "out", "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "out", "app", "upstreams.conf"), []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	socket, states := notifySocket(t)
	env := []string{"NOTIFY_SOCKET=" + socket, "WEFT_LISTEN=127.0.0.1:0"}
	w := startWeftIn(t, dir, env, append([]string{"confd", "-backend", "file", "-file", "values.yaml", "-confdir", "confdir"}, args...)...)
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case s := <-states:
			if strings.Contains(s, "READY=1") && strings.Contains(s, "STATUS=ready: 3 deployed (confd-app, confd-cache, confd-upstreams)") {
				return w
			}
		case <-deadline:
			t.Fatalf("no READY=1 within 2 minutes:\n%s", w.out)
		}
	}
}

// editValues replaces old with new in the values file of dir, the way
// editors save: a new file renamed over the old one.
func editValues(t *testing.T, dir string, pairs ...string) {
	t.Helper()
	values := filepath.Join(dir, "values.yaml")
	data, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(pairs); i += 2 {
		if !bytes.Contains(data, []byte(pairs[i])) {
			t.Fatalf("values.yaml has no %q", pairs[i])
		}
		data = bytes.Replace(data, []byte(pairs[i]), []byte(pairs[i+1]), 1)
	}
	tmp := values + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, values); err != nil {
		t.Fatal(err)
	}
}

// waitContains waits until the file holds want and returns when it did.
func waitContains(t *testing.T, w *weftProcess, file, want string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, _ := os.ReadFile(file)
		if strings.Contains(string(got), want) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no %q after %s:\n%s\nweft's output:\n%s", file, want, within, got, w.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConfdDaemon: without -onetime, weft confd keeps the files in step
// with the backend, and under systemd says READY=1 once every resource is
// delivered; with -watch it follows a change at once, far within
// -interval (confd's default, 600s).
func TestConfdDaemon(t *testing.T) {
	dir := confdCopy(t)
	w := confdDaemon(t, dir, "-watch", "-log-level", "warn")
	editValues(t, dir, "port: 8080", "port: 9090")
	waitContains(t, w, filepath.Join(dir, "out", "app", "app.conf"), "port = 9090\n", time.Minute)
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft confd exited with %v", err)
	}
}

// TestConfdDaemonPolls: without -watch, weft confd reads the backend every
// -interval and follows nothing in between, as confd does: a change made
// right after a read reaches its file only with the next read.
func TestConfdDaemonPolls(t *testing.T) {
	const interval = 4 * time.Second
	dir := confdCopy(t)
	w := confdDaemon(t, dir, "-interval", "4", "-log-level", "warn")
	app := filepath.Join(dir, "out", "app", "app.conf")
	// A first change shows when a read happened: just before the file
	// has it.
	editValues(t, dir, "port: 8080", "port: 9090")
	read := waitContains(t, w, app, "port = 9090\n", 2*interval)
	editValues(t, dir, "port: 9090", "port: 9191")
	time.Sleep(interval / 3)
	if got, _ := os.ReadFile(app); !strings.Contains(string(got), "port = 9090\n") {
		t.Fatalf("a change was followed between two reads of the backend:\n%s", got)
	}
	seen := waitContains(t, w, app, "port = 9191\n", 2*interval)
	if d := seen.Sub(read); d < interval/2 {
		t.Errorf("the second change came %s after the first: want about -interval, %s", d, interval)
	}
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft confd exited with %v", err)
	}
}

// TestConfdDaemonNoop: -noop without -onetime renders every change and
// shows what it would change, writing nothing and running no command: a
// changed value is logged as a would-be change with its diff (the golden
// file, with the folder written $DIR) on stdout, and the file stays.
func TestConfdDaemonNoop(t *testing.T) {
	dir := confdCopy(t)
	args := []string{"-backend", "file", "-file", "values.yaml", "-confdir", "confdir", "-log-level", "error"}
	if code, _, stderr := confdRun(t, dir, nil, append(args, "-onetime")...); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	app := filepath.Join(dir, "out", "app", "app.conf")
	before, err := os.ReadFile(app)
	if err != nil {
		t.Fatal(err)
	}
	reloads := filepath.Join(dir, "out", "reloads.log")
	reloadsBefore, _ := os.ReadFile(reloads)

	w := startWeftIn(t, dir, []string{"WEFT_LISTEN=127.0.0.1:0"}, append([]string{"confd", "-noop", "-watch"}, args[:len(args)-2]...)...)
	// Once every resource is rendered, nothing is pending; then a value
	// changes.
	testkit.Eventually(t, 2*time.Minute, func() error {
		if _, ok := w.logged("noop: every resource rendered"); !ok {
			return errors.New("not every resource rendered")
		}
		return nil
	})
	if _, ok := w.logged("noop: would change"); ok {
		t.Fatalf("a change is pending before any value changed:\n%s", w.out)
	}
	editValues(t, dir, "port: 8080", "port: 9090")
	testkit.Eventually(t, time.Minute, func() error {
		rec, ok := w.logged("noop: would change")
		if !ok {
			return errors.New("no would-be change logged")
		}
		if rec["dest"] != app {
			return fmt.Errorf("would-be change logged for %v, want %s", rec["dest"], app)
		}
		return nil
	})
	var diff strings.Builder
	for line := range strings.Lines(w.out.String()) {
		if !strings.HasPrefix(line, "{") {
			diff.WriteString(strings.ReplaceAll(line, dir, "$DIR"))
		}
	}
	want, err := os.ReadFile(filepath.Join("testdata", "confd", "noop-daemon.diff"))
	if err != nil {
		t.Fatal(err)
	}
	if diff.String() != string(want) {
		t.Errorf("stdout:\n%s\nwant\n%s", diff.String(), want)
	}
	// A deployer would have written it by now.
	time.Sleep(time.Second)
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft confd exited with %v", err)
	}
	if after, _ := os.ReadFile(app); !bytes.Equal(after, before) {
		t.Errorf("-noop wrote app.conf:\n%s", after)
	}
	if after, _ := os.ReadFile(reloads); !bytes.Equal(after, reloadsBefore) {
		t.Errorf("-noop ran reload_cmd: %q", after)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "app", ".app.conf.weft-stage")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("without -keep-stage-file a staged file was kept: %v", err)
	}
}

// TestConfdBatch: with -batch-interval, the changes of a burst spanning
// keys of two resources, made within the interval, are rendered in one
// pass: each resource's file is written once and its reload_cmd runs
// once; a resource whose keys did not change is not touched.
func TestConfdBatch(t *testing.T) {
	dir := confdCopy(t)
	w := confdDaemon(t, dir, "-watch", "-batch-interval", "3", "-log-level", "warn")
	reloads := filepath.Join(dir, "out", "reloads.log")
	before, err := os.ReadFile(reloads)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	editValues(t, dir, "port: 8080", "port: 9090")
	time.Sleep(300 * time.Millisecond)
	editValues(t, dir, "web2: 10.0.0.2:80", "web2: 10.0.0.2:81")
	time.Sleep(300 * time.Millisecond)
	editValues(t, dir, "url: db.internal:5432", "url: db2.internal:5432")
	if d := time.Since(start); d > 2*time.Second {
		t.Skipf("the burst took %s, more than the batch interval allows to judge", d)
	}
	waitContains(t, w, filepath.Join(dir, "out", "app", "app.conf"), "database = db2.internal:5432\n", time.Minute)
	waitContains(t, w, filepath.Join(dir, "out", "app", "upstreams.conf"), "10.0.0.2:81", time.Minute)
	// Another batch interval, for anything that would come late.
	time.Sleep(4 * time.Second)
	after, err := os.ReadFile(reloads)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(after[len(before):])); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"app", "upstreams"}) {
		t.Errorf("reloads after the burst: %q, want app and upstreams once each", got)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "out", "app", "app.conf")); !strings.Contains(string(got), "port = 9090\n") {
		t.Errorf("app.conf misses the first change of the burst:\n%s", got)
	}
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft confd exited with %v", err)
	}
}

// TestConfdConsulToken: `weft confd -backend consul` reads an agent with
// ACLs with the token consul's own tools take, here from the file named by
// CONSUL_HTTP_TOKEN_FILE; without a token the keys cannot be read and the
// pass fails.
func TestConfdConsulToken(t *testing.T) {
	srv := testkit.StartConsul(t, testkit.WithConsulACLs("root-token"))
	for key, value := range map[string]string{
		"myapp/port": "8080", "myapp/database/url": "db.internal:5432", "myapp/database/user": "app",
		"myapp/upstreams/web1": "10.0.0.1:80", "myapp/upstreams/web2": "10.0.0.2:80",
		"myapp/cache/size": "256", "myapp/cache/ttl": "60s",
	} {
		srv.MustDo(t, "PUT", "/v1/kv/"+key, []byte(value))
	}
	srv.MustDo(t, "PUT", "/v1/acl/policy", []byte(`{"Name":"myapp-read","Rules":"key_prefix \"myapp\" { policy = \"read\" }"}`))
	var tok struct{ SecretID string }
	if err := json.Unmarshal(srv.MustDo(t, "PUT", "/v1/acl/token", []byte(`{"Policies":[{"Name":"myapp-read"}]}`)), &tok); err != nil || tok.SecretID == "" {
		t.Fatalf("token: %v %+v", err, tok)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tok.SecretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-onetime", "-backend", "consul", "-node", srv.Addr, "-confdir", "confdir", "-log-level", "error"}
	for _, tc := range []struct {
		name   string
		env    []string
		code   int
		stderr string
	}{
		// Consul shows an anonymous reader no key.
		{"no token", []string{"CONSUL_HTTP_TOKEN=", "CONSUL_HTTP_TOKEN_FILE="}, ExitFailed, "key does not exist: /port"},
		{"CONSUL_HTTP_TOKEN_FILE", []string{"CONSUL_HTTP_TOKEN=", "CONSUL_HTTP_TOKEN_FILE=" + file}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := confdCopy(t)
			code, _, stderr := confdRun(t, dir, tc.env, args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, want %d and %q in\n%s", code, tc.code, tc.stderr, stderr)
			}
			if code == 0 {
				assertConfdGolden(t, dir)
			}
		})
	}
}
