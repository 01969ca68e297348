package historyview_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftio/weft/cmd/weft/internal/historyview"
	"github.com/weftio/weft/pkg/msg"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestViews prints history and diff answers as people read them; the
// golden files under testdata/ are the expected output (-update rewrites
// them).
func TestViews(t *testing.T) {
	at := time.Date(2026, 11, 24, 14, 0, 0, 0, time.UTC)
	entries := []msg.HistoryEntry{
		{Target: "edge", Version: 4, BundleHash: "4444444444444444", RenderedAt: at.Add(-time.Minute), OK: true, VerdictAt: at},
		{Target: "edge", Version: 3, BundleHash: "3333333333333333", RenderedAt: at.Add(-5 * time.Minute), OK: false, Reason: "haproxy: [ALERT] parsing [haproxy.cfg:12]:\n unknown keyword 'bind2'"},
		{Target: "edge", Version: 1, BundleHash: "1111111111111111", RenderedAt: at.Add(-time.Hour), OK: true, Deployed: []msg.HistoryDeploy{
			{Instance: "a", At: at.Add(-59 * time.Minute)}, {Instance: "b", Site: "edge-1", At: at.Add(-58 * time.Minute)},
		}},
	}
	tests := []struct {
		name  string
		write func(*bytes.Buffer)
	}{
		{"history-empty", func(b *bytes.Buffer) {
			historyview.History(b, msg.HistoryReply{Target: "edge", Keep: 20, MaxAge: 168 * time.Hour, At: at})
		}},
		{"history-pinned", func(b *bytes.Buffer) {
			historyview.History(b, msg.HistoryReply{
				Target: "edge", Entries: entries, Running: map[string]uint64{"a": 1, "b": 1}, LastGood: 4, Keep: 3, MaxAge: 24 * time.Hour, At: at,
				Pin: &msg.Pin{Target: "edge", Version: 1, BundleHash: "1111111111111111", Since: at.Add(-10 * time.Minute), By: "alice", Reason: "v4 drops /api"},
			})
		}},
		{"diff", func(b *bytes.Buffer) {
			historyview.Diff(b, msg.DiffReply{Target: "edge", FromVersion: 1, FromHash: "1111111111111111", ToVersion: 4, ToHash: "4444444444444444", Files: []msg.FileDiff{
				{Path: "haproxy.cfg", Change: msg.FileChanged, Unified: "--- v1/haproxy.cfg\n+++ v4/haproxy.cfg\n@@ -1,2 +1,2 @@\n frontend f\n-  bind :80\n+  bind :8080\n"},
				{Path: "maps/new.map", Change: msg.FileAdded, Unified: "--- /dev/null\n+++ v4/maps/new.map\n@@ -0,0 +1 @@\n+a b\n"},
				{Path: "maps/old.map", Change: msg.FileRemoved, Unified: "--- v1/maps/old.map\n+++ /dev/null\n@@ -1 +0,0 @@\n-c d\n"},
			}})
		}},
		{"diff-same", func(b *bytes.Buffer) {
			historyview.Diff(b, msg.DiffReply{Target: "edge", FromVersion: 4, FromHash: "4444444444444444", ToVersion: 5, ToHash: "4444444444444444"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			tt.write(&b)
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Fatalf("output differs from %s:\n%s", golden, b.String())
			}
		})
	}
}
