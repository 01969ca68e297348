package demo

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// TestReread: the edited configuration becomes the runtime configuration
// for the same HAProxy; one the demo cannot run, or whose target moved,
// is refused.
func TestReread(t *testing.T) {
	orig, err := os.ReadFile(quickstart)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "weft.yaml")
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runtimePath := filepath.Join(dir, "runtime.yaml")
	if err := plan.WriteConfig(runtimePath, "/run/m.sock", "/run/a.sock"); err != nil {
		t.Fatal(err)
	}
	written, _ := os.ReadFile(runtimePath)
	for _, tc := range []struct {
		name    string
		yaml    string
		want    string // in the runtime configuration
		wantErr error  // or this
	}{
		{"unchanged", string(orig), string(written), nil},
		{"edited", strings.Replace(string(orig), `string "no route"`, `string "nothing here"`, 1), `nothing here`, nil},
		{"moved", strings.Replace(string(orig), "dest: out", "dest: elsewhere", 1), "", ErrNotDemonstrable},
		{"no literal bind", strings.Replace(string(orig), "bind 127.0.0.1:18080", `bind {{ "127.0.0.1:18080" }}`, 1), "", ErrNotDemonstrable},
		{"broken", "targets: [", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := plan.Reread(path)
			switch {
			case tc.want == "" && err == nil:
				t.Fatalf("no error; runtime configuration:\n%s", got)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			case tc.want != "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && !strings.Contains(string(got), tc.want):
				t.Fatalf("runtime configuration without %q:\n%s", tc.want, got)
			case tc.want != "" && !strings.Contains(string(got), `"/run/a.sock"`):
				t.Fatalf("runtime configuration without the admin socket:\n%s", got)
			}
		})
	}
}

// TestRemoveStale removes only the folders whose weft is gone.
func TestRemoveStale(t *testing.T) {
	tmp := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{
		"weft-demo-gone":    strconv.Itoa(gone.Process.Pid),
		"weft-demo-running": strconv.Itoa(os.Getppid()),
		"weft-demo-mine":    strconv.Itoa(os.Getpid()),
		"weft-demo-unowned": "",
		"other-gone":        strconv.Itoa(gone.Process.Pid),
	}
	for name, pid := range owners {
		if err := os.Mkdir(filepath.Join(tmp, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if pid != "" {
			if err := os.WriteFile(filepath.Join(tmp, name, ownerFile), []byte(pid), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	RemoveStale(discard(), tmp)
	for name := range owners {
		_, err := os.Stat(filepath.Join(tmp, name))
		if removed := errors.Is(err, os.ErrNotExist); removed != (name == "weft-demo-gone") {
			t.Errorf("%s: removed %v", name, removed)
		}
	}
}
