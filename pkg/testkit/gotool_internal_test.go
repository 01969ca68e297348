package testkit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestPruneBuilds removes the build folders of workspaces unused since the
// cutoff and keeps the rest.
func TestPruneBuilds(t *testing.T) {
	builds := t.TempDir()
	now := time.Now()
	for name, age := range map[string]time.Duration{"old": 8 * 24 * time.Hour, "recent": time.Hour, "fresh": 0} {
		dir := filepath.Join(builds, name, "prog")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bin"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(filepath.Join(builds, name), at, at); err != nil {
			t.Fatal(err)
		}
	}
	pruneBuilds(builds, now.Add(-buildsKept))
	entries, err := os.ReadDir(builds)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"fresh", "recent"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}
