package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

// demoRun is `weft up --demo` on a copy of the quickstart, on ports of
// its own.
type demoRun struct {
	*weftProcess
	dir                                string
	args                               []string
	httpPort, backendPort, nats, probe int
}

// startDemo starts `weft up --demo` on a copy of the quickstart and waits
// until HAProxy serves it.
func startDemo(t *testing.T, extra ...string) *demoRun {
	t.Helper()
	testkit.HAProxy(t)
	d := &demoRun{dir: t.TempDir(), httpPort: testkit.FreePort(t), backendPort: testkit.FreePort(t), nats: testkit.FreePort(t), probe: testkit.FreePort(t)}
	copyTree(t, quickstart, d.dir)
	onPorts(t, d.dir, d.httpPort, d.backendPort)
	d.args = append([]string{"up", "--demo", "--config", filepath.Join(d.dir, "weft.yaml"),
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(d.nats), "--listen", "127.0.0.1:" + strconv.Itoa(d.probe)}, extra...)
	d.weftProcess = startWeft(t, d.args...)
	d.served(t)
	return d
}

// served waits until shop.example.com is answered by both webs.
func (d *demoRun) served(t *testing.T) {
	t.Helper()
	waitFor(t, "the quickstart served", func() error { return bothWebs(d.httpPort) })
}

// ports are the addresses the demo listens on.
func (d *demoRun) ports() []string {
	out := []string{}
	for _, p := range []int{d.httpPort, d.nats, d.probe} {
		out = append(out, "127.0.0.1:"+strconv.Itoa(p))
	}
	for _, ip := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		out = append(out, ip+":"+strconv.Itoa(d.backendPort))
	}
	return out
}

// leftNothing waits until no process names the copy's folder, every port
// of the demo is free and the demo's temporary folder is gone.
func (d *demoRun) leftNothing(t *testing.T, out string) {
	t.Helper()
	d.noProcessNorPort(t)
	ready, _ := logged(out, "HAProxy serves the target")
	runDir := filepath.Dir(fmt.Sprint(ready["master_socket"]))
	if !strings.HasPrefix(filepath.Base(runDir), "weft-demo-") {
		t.Fatalf("no demo folder logged: %v", ready)
	}
	if _, err := os.Stat(runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo's folder %s is still there: %v", runDir, err)
	}
}

// noProcessNorPort waits until no process names the copy's folder and
// every port of the demo is free.
func (d *demoRun) noProcessNorPort(t *testing.T) {
	t.Helper()
	waitFor(t, "nothing left of weft", func() error {
		if left := testkit.ProcessesNaming(t, d.dir); len(left) > 0 {
			return fmt.Errorf("processes left: %q", left)
		}
		for _, a := range d.ports() {
			l, err := net.Listen("tcp", a)
			if err != nil {
				return fmt.Errorf("%s is still held: %w", a, err)
			}
			l.Close()
		}
		return nil
	})
}

// errorLines returns the log records at level ERROR in out.
func errorLines(out string) []string {
	var lines []string
	for l := range strings.Lines(out) {
		if strings.Contains(l, `"level":"ERROR"`) {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestSecondUpFailsNamingTheTakenAddresses: a second `weft up` on the
// same addresses exits non-zero at once, naming every taken address and
// the flag and environment variable that change it; the first keeps
// serving.
func TestSecondUpFailsNamingTheTakenAddresses(t *testing.T) {
	first := startDemo(t)
	plain := slices.DeleteFunc(slices.Clone(first.args), func(a string) bool { return a == "--demo" })
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"demo", first.args, []string{
			"--nats-listen or WEFT_NATS_LISTEN", "--listen or WEFT_LISTEN",
			fmt.Sprintf("127.0.0.1:%d (HAProxy of the demo", first.httpPort), "(--config or WEFT_CONFIG)",
			fmt.Sprintf("127.0.0.2:%d (the demo's echo backend web-2)", first.backendPort),
		}},
		{"without demo", plain, []string{"--nats-listen or WEFT_NATS_LISTEN", "--listen or WEFT_LISTEN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tc.args...)
			cmd.Env = append(os.Environ(), asWeft+"=1")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("second weft: %v, want a non-zero exit\n%s", err, out)
			}
			for _, w := range append(tc.want, fmt.Sprintf("127.0.0.1:%d (embedded NATS server): address in use", first.nats),
				fmt.Sprintf("127.0.0.1:%d (/healthz, /readyz and /metrics): address in use", first.probe)) {
				if !strings.Contains(string(out), w) {
					t.Errorf("the second weft does not say %q:\n%s", w, out)
				}
			}
		})
	}
	if err := bothWebs(first.httpPort); err != nil {
		t.Fatalf("the first weft: %v", err)
	}
}

// TestUpStopsCleanlyOnSignals: Ctrl-C (SIGINT) and SIGTERM stop weft with
// exit status 0, no ERROR record, and nothing left behind.
func TestUpStopsCleanlyOnSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			d := startDemo(t)
			if err := d.signal(t, sig); err != nil {
				t.Fatalf("weft exited with %v after %s", err, sig)
			}
			if errs := errorLines(d.out.String()); len(errs) > 0 {
				t.Errorf("ERROR records after %s:\n%s", sig, strings.Join(errs, ""))
			}
			d.leftNothing(t, d.out.String())
		})
	}
}

// TestUpStoppedWhileStarting: SIGTERM at each step of the start
// (backends up, HAProxy starting, NATS provisioning, services starting)
// is a stop as asked: exit status 0, no ERROR record, nothing left.
func TestUpStoppedWhileStarting(t *testing.T) {
	for _, step := range []string{"echo backend listening", "HAProxy serves the target", "embedded NATS server started", "serving /healthz"} {
		t.Run(step, func(t *testing.T) {
			testkit.HAProxy(t)
			d := &demoRun{dir: t.TempDir(), httpPort: testkit.FreePort(t), backendPort: testkit.FreePort(t), nats: testkit.FreePort(t), probe: testkit.FreePort(t)}
			copyTree(t, quickstart, d.dir)
			onPorts(t, d.dir, d.httpPort, d.backendPort)
			d.weftProcess = startWeft(t, "up", "--demo", "--config", filepath.Join(d.dir, "weft.yaml"),
				"--nats-listen", "127.0.0.1:"+strconv.Itoa(d.nats), "--listen", "127.0.0.1:"+strconv.Itoa(d.probe))
			deadline := time.Now().Add(time.Minute)
			for _, ok := d.logged(step); !ok; _, ok = d.logged(step) {
				if done, err := d.exited(); done {
					t.Fatalf("weft exited (%v) before it logged %q", err, step)
				}
				if time.Now().After(deadline) {
					t.Fatalf("weft did not log %q", step)
				}
				time.Sleep(time.Millisecond)
			}
			if err := d.signal(t, syscall.SIGTERM); err != nil {
				t.Fatalf("weft exited with %v after SIGTERM", err)
			}
			if errs := errorLines(d.out.String()); len(errs) > 0 {
				t.Errorf("ERROR records:\n%s", strings.Join(errs, ""))
			}
			d.noProcessNorPort(t)
			owned, _ := filepath.Glob(filepath.Join(os.TempDir(), "weft-demo-*", "weft.pid"))
			for _, f := range owned {
				if strings.TrimSpace(readFile(f)) == strconv.Itoa(d.cmd.Process.Pid) {
					t.Errorf("the demo's folder %s is still there", filepath.Dir(f))
				}
			}
		})
	}
}

// TestUpKilledLeavesNothing: weft killed with SIGKILL cannot stop HAProxy
// itself; the kernel does (parent-death signal), and every port is free.
func TestUpKilledLeavesNothing(t *testing.T) {
	d := startDemo(t)
	if err := d.signal(t, syscall.SIGKILL); err == nil {
		t.Fatal("weft exited 0 after SIGKILL")
	}
	waitFor(t, "nothing left of weft", func() error {
		if left := testkit.ProcessesNaming(t, d.dir); len(left) > 0 {
			return fmt.Errorf("processes left: %q", left)
		}
		for _, a := range d.ports() {
			l, err := net.Listen("tcp", a)
			if err != nil {
				return fmt.Errorf("%s is still held: %w", a, err)
			}
			l.Close()
		}
		return nil
	})
	// The demo's folder could not be removed by the killed weft; the next
	// one removes it.
	ready, _ := d.logged("HAProxy serves the target")
	runDir := filepath.Dir(fmt.Sprint(ready["master_socket"]))
	if _, err := os.Stat(runDir); err != nil {
		t.Fatalf("the killed weft's folder: %v", err)
	}
	next := startDemo(t)
	rec, ok := next.logged("removed the folder of a weft that was killed")
	if !ok || rec["dir"] != runDir {
		t.Errorf("the next weft did not say it removed %s: %v", runDir, rec)
	}
	if _, err := os.Stat(runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed weft's folder %s is still there: %v", runDir, err)
	}
}

// TestUpExitsWithItsParent: with --exit-with-parent, weft stops cleanly
// when the process that started it is killed, and leaves nothing behind.
func TestUpExitsWithItsParent(t *testing.T) {
	testkit.HAProxy(t)
	d := &demoRun{dir: t.TempDir(), httpPort: testkit.FreePort(t), backendPort: testkit.FreePort(t), nats: testkit.FreePort(t), probe: testkit.FreePort(t)}
	copyTree(t, quickstart, d.dir)
	onPorts(t, d.dir, d.httpPort, d.backendPort)
	logFile := filepath.Join(t.TempDir(), "weft.log")
	// sh starts weft and waits for it: weft's parent is sh.
	parent := exec.Command("sh", "-c", `"$0" "$@" >"$WEFT_TEST_LOG" 2>&1 & wait`, os.Args[0], "up", "--demo", "--exit-with-parent",
		"--config", filepath.Join(d.dir, "weft.yaml"), "--nats-listen", "127.0.0.1:"+strconv.Itoa(d.nats), "--listen", "127.0.0.1:"+strconv.Itoa(d.probe))
	parent.Env = append(os.Environ(), asWeft+"=1", "WEFT_TEST_LOG="+logFile)
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- parent.Wait() }()
	t.Cleanup(func() {
		_ = parent.Process.Kill()
		<-done
		for _, p := range testkit.ProcessesNaming(t, d.dir) {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("weft's output:\n%s", readFile(logFile))
		}
	})
	d.served(t)
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-done
	done <- nil // for the cleanup
	waitFor(t, "weft stopped", func() error {
		return contains(readFile(logFile), `"msg":"stopped","err":null`)
	})
	out := readFile(logFile)
	if errs := errorLines(out); len(errs) > 0 {
		t.Errorf("ERROR records:\n%s", strings.Join(errs, ""))
	}
	d.leftNothing(t, out)
}

// signal sends sig to weft and waits for it to exit.
func (p *weftProcess) signal(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("weft did not exit within 30s of %s", sig)
		return nil
	}
}

// noRoute is what the quickstart's HAProxy answers for a host it routes
// nowhere; reroute edits the text of that answer in weft.yaml.
const noRoute = `string "no route"`

func (d *demoRun) reroute(t *testing.T, text string, replace bool) {
	t.Helper()
	p := filepath.Join(d.dir, "weft.yaml")
	y := strings.Replace(readFile(p), noRoute, text, 1)
	if !replace {
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	// As an editor saves: a new file renamed over the old one.
	tmp := filepath.Join(d.dir, ".weft.yaml.swp")
	if err := os.WriteFile(tmp, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// answers waits until a host HAProxy routes nowhere is answered want.
func (d *demoRun) answers(t *testing.T, want string) {
	t.Helper()
	waitFor(t, "answered "+want, func() error {
		if got := httpGet(d.httpPort, "nowhere.example.com", "/"); got != want {
			return fmt.Errorf("answered %q", got)
		}
		return nil
	})
}

// TestUpReloadsOnSIGHUP: SIGHUP re-reads weft.yaml, validates it and swaps
// it in; a broken one is rejected with an ERROR record and the running
// configuration keeps serving. weft keeps running through both, and still
// stops cleanly after.
func TestUpReloadsOnSIGHUP(t *testing.T) {
	d := startDemo(t, "--watch-config=false")
	d.answers(t, "404 no route")
	hup := func() {
		t.Helper()
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	// Without the signal (the file is not watched here) nothing changes.
	d.reroute(t, `string "no route here"`, false)
	hup()
	d.answers(t, "404 no route here")
	if rec, ok := d.logged("configuration activated"); !ok || !strings.Contains(fmt.Sprint(rec["origin"]), "(signal hangup)") {
		t.Fatalf("no record of the configuration activated on SIGHUP: %v", rec)
	}
	if errs := errorLines(d.out.String()); len(errs) > 0 {
		t.Fatalf("ERROR records after a good reload:\n%s", strings.Join(errs, ""))
	}

	p := filepath.Join(d.dir, "weft.yaml")
	broken := strings.Replace(readFile(p), `string "no route here"`, `string "{% for %}"`, 1)
	if err := os.WriteFile(p, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	hup()
	waitFor(t, "the broken configuration rejected", func() error {
		for _, l := range errorLines(d.out.String()) {
			if strings.Contains(l, "configuration rejected; the running one stays") && strings.Contains(l, "for") {
				return nil
			}
		}
		return errNotYet
	})
	d.answers(t, "404 no route here")
	if err := bothWebs(d.httpPort); err != nil {
		t.Fatal(err)
	}
	if err := d.signal(t, syscall.SIGINT); err != nil {
		t.Fatalf("weft exited with %v after an interrupt", err)
	}
	d.leftNothing(t, d.out.String())
}

// TestUpFollowsTheFileOnDisk: weft.yaml saved as an editor does (a new
// file renamed over it) is validated and swapped in without a signal.
func TestUpFollowsTheFileOnDisk(t *testing.T) {
	d := startDemo(t)
	d.answers(t, "404 no route")
	d.reroute(t, `string "no route, edited"`, true)
	d.answers(t, "404 no route, edited")
	rec, ok := d.logged("configuration activated")
	if !ok || !strings.Contains(fmt.Sprint(rec["origin"]), "(changed on disk)") {
		t.Fatalf("no record of the configuration activated on the change: %v", rec)
	}
	if errs := errorLines(d.out.String()); len(errs) > 0 {
		t.Fatalf("ERROR records:\n%s", strings.Join(errs, ""))
	}
}

// TestMakeRunStopsWithMake runs `make run` as a person or CI does, on a
// copy of the quickstart, and ends make alone, as a supervisor does:
// SIGTERM (make passes it to weft) or SIGKILL (weft's parent-death
// signal). Nothing of weft is left, and every port is free.
func TestMakeRunStopsWithMake(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	testkit.HAProxy(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// `make run` builds weft where the other tests' programs are built
	// (the checkout's bin/ is left alone), with their flags: there the go
	// command finds weft up to date and does not link it again, in each
	// run of make below.
	bin := testkit.GoBuild(t, "github.com/weftio/weft/cmd/weft")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			d := &demoRun{dir: t.TempDir(), httpPort: testkit.FreePort(t), backendPort: testkit.FreePort(t), nats: testkit.FreePort(t), probe: testkit.FreePort(t)}
			copyTree(t, quickstart, d.dir)
			onPorts(t, d.dir, d.httpPort, d.backendPort)
			out := &testkit.SyncBuffer{}
			mk := exec.Command("make", "-C", root, "run", "CONFIG="+filepath.Join(d.dir, "weft.yaml"), "RUN_BIN="+bin)
			mk.Env = append(os.Environ(), "WEFT_NATS_LISTEN=127.0.0.1:"+strconv.Itoa(d.nats), "WEFT_LISTEN=127.0.0.1:"+strconv.Itoa(d.probe), "GOFLAGS="+testkit.GoFlags())
			mk.Stdout, mk.Stderr = out, out
			// A weft left behind holds the output pipe: Wait returns anyway.
			mk.WaitDelay = 5 * time.Second
			if err := mk.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- mk.Wait() }()
			t.Cleanup(func() {
				_ = mk.Process.Kill()
				<-done
				for _, p := range testkit.ProcessesNaming(t, d.dir) {
					_ = syscall.Kill(p.Pid, syscall.SIGKILL)
				}
				if t.Failed() {
					t.Logf("make's output:\n%s", out)
				}
			})
			// weft is up to date (GoBuild above): make only checks it.
			testkit.Eventually(t, 10*time.Minute, func() error {
				if _, ok := logged(out.String(), "HAProxy serves the target"); !ok {
					return errNotYet
				}
				return nil
			})
			d.served(t)
			if err := mk.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			<-done
			done <- nil // for the cleanup
			waitFor(t, "weft stopped", func() error { return contains(out.String(), `"msg":"stopped","err":null`) })
			if errs := errorLines(out.String()); len(errs) > 0 {
				t.Errorf("ERROR records:\n%s", strings.Join(errs, ""))
			}
			d.leftNothing(t, out.String())
		})
	}
}
