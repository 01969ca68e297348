package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
