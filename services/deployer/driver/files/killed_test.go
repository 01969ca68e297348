//go:build linux

package files

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// killedDest, set in the environment of a child process of
// TestKilledAfterInstall, makes it apply killedBundle into that folder and
// kill itself once the files are installed; killedReload is its reload
// command.
const (
	killedDest   = "WEFT_FILES_TEST_KILLED_DEST"
	killedReload = "WEFT_FILES_TEST_KILLED_RELOAD"
)

// TestKilledAfterInstall kills (SIGKILL) a process applying a bundle at the
// worst moment: every changed file is in place, and the process has not
// recorded anything since. A new Driver then still owes the reload those
// files need, and owns the files and folders the killed process added.
func TestKilledAfterInstall(t *testing.T) {
	before := bundle("a.conf", "a1", "b.conf", "b1")
	killed := bundle("a.conf", "a2", "b.conf", "b1", "c.conf", "c2", "conf.d/d.conf", "d2")
	if dest := os.Getenv(killedDest); dest != "" {
		d, err := New(Options{Dest: dest, ReloadCmd: os.Getenv(killedReload)})
		if err != nil {
			t.Fatal(err)
		}
		d.afterInstall = func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		_, err = d.Apply(context.Background(), killed)
		t.Fatalf("Apply returned (err %v) instead of being killed", err)
	}
	t.Parallel()
	// killedApply delivers before, then has a child process killed while
	// it delivers killed.
	killedApply := func(t *testing.T) rig {
		t.Helper()
		r := newRig(t)
		r.apply(t, r.driver(t, Options{ReloadCmd: r.reloadCmd()}), before)
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledAfterInstall$")
		cmd.Env = append(os.Environ(), killedDest+"="+r.dest, killedReload+"="+r.reloadCmd())
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the child was not killed: %v\n%s", err, out)
		}
		r.assertBundle(t, killed)
		if n := r.reloads(t); n != 1 {
			t.Fatalf("%d reloads before the kill, want 1", n)
		}
		return r
	}

	t.Run("the same bundle again reloads", func(t *testing.T) {
		t.Parallel()
		r := killedApply(t)
		d := r.driver(t, Options{ReloadCmd: r.reloadCmd()})
		res := r.apply(t, d, killed)
		if len(res.Written) != 0 || !res.Reloaded || r.reloads(t) != 2 {
			t.Errorf("Result %+v with %d reloads, want nothing written and the owed reload", res, r.reloads(t))
		}
		if res = r.apply(t, d, killed); res.Reloaded || r.reloads(t) != 2 {
			t.Errorf("Result %+v with %d reloads, want nothing once the reload ran", res, r.reloads(t))
		}
	})
	t.Run("the previous bundle removes what was added", func(t *testing.T) {
		t.Parallel()
		r := killedApply(t)
		res := r.apply(t, r.driver(t, Options{ReloadCmd: r.reloadCmd()}), before)
		r.assertBundle(t, before)
		for _, p := range []string{"c.conf", "conf.d"} {
			if r.exists(p) {
				t.Errorf("%s, added by the killed process, is still in Dest", p)
			}
		}
		if !res.Reloaded || r.reloads(t) != 2 {
			t.Errorf("Result %+v with %d reloads, want one reload", res, r.reloads(t))
		}
	})
}
