package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/svc/telemetry"
)

// TestLoggerWritesDurationsAsText checks that every way a duration reaches
// a record (argument, attribute, group, logger attribute) is written as a
// duration string, and that other values are left alone.
func TestLoggerWritesDurationsAsText(t *testing.T) {
	var buf bytes.Buffer
	log := telemetry.NewLogger(&buf, slog.LevelDebug).With("interval", 30*time.Second)
	log.InfoContext(context.Background(), "rendered",
		"took", 1500*time.Millisecond,
		slog.Duration("wait", 250*time.Millisecond),
		slog.Group("retry", "in", 2*time.Minute, "attempt", 3),
		"count", 7)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	retry, _ := rec["retry"].(map[string]any)
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"argument", rec["took"], "1.5s"},
		{"slog.Duration", rec["wait"], "250ms"},
		{"in a group", retry["in"], "2m0s"},
		{"logger attribute", rec["interval"], "30s"},
		{"a number stays a number", rec["count"], 7.0},
		{"a number in a group", retry["attempt"], 3.0},
		{"message", rec["msg"], "rendered"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %#v, want %#v (line %s)", c.name, c.got, c.want, buf.String())
		}
	}
}
