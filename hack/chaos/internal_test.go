package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSameTree(t *testing.T) {
	for _, tc := range []struct {
		name      string
		want, got map[string]string
		diff      string // "" when equal
	}{
		{"equal, driver files ignored",
			map[string]string{"haproxy.cfg": "a", "maps/x.map": "m"},
			map[string]string{"haproxy.cfg": "a", "maps/x.map": "m", ".weft-manifest.json": "{}", ".weft-stage-1/haproxy.cfg": "old"}, ""},
		{"a byte differs", map[string]string{"haproxy.cfg": "a\n"}, map[string]string{"haproxy.cfg": "a"}, "haproxy.cfg differs"},
		{"a file missing", map[string]string{"haproxy.cfg": "a", "maps/x.map": "m"}, map[string]string{"haproxy.cfg": "a"}, "maps/x.map missing"},
		{"a file too many", map[string]string{"haproxy.cfg": "a"}, map[string]string{"haproxy.cfg": "a", "maps/old.map": "m"}, "maps/old.map not rendered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, got := t.TempDir(), t.TempDir()
			write(t, want, tc.want)
			write(t, got, tc.got)
			err := sameTree(want, got)
			switch {
			case tc.diff == "" && err != nil:
				t.Fatalf("sameTree = %v, want equal", err)
			case tc.diff != "" && (err == nil || !strings.Contains(err.Error(), tc.diff)):
				t.Fatalf("sameTree = %v, want %q", err, tc.diff)
			}
		})
	}
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOptionsCheck(t *testing.T) {
	good := Options{Mode: Faults, Sites: 1, Edits: 1, Replicas: 1, Duration: time.Second, Settle: time.Second,
		ServiceKillEvery: time.Second, NodeKillEvery: time.Second, Root: "/"}
	if err := good.check(); err != nil {
		t.Fatalf("check(%+v) = %v", good, err)
	}
	for name, change := range map[string]func(*Options){
		"unknown mode":         func(o *Options) { o.Mode = "fault" },
		"no edits":             func(o *Options) { o.Edits = 0 },
		"no duration":          func(o *Options) { o.Duration = 0 },
		"faults without kills": func(o *Options) { o.ServiceKillEvery = 0 },
		"node kills every 0":   func(o *Options) { o.NodeKillEvery = 0 },
		"no repository root":   func(o *Options) { o.Root = "" },
	} {
		o := good
		change(&o)
		if err := o.check(); err == nil {
			t.Errorf("%s: check(%+v) = nil, want an error", name, o)
		}
	}
}
