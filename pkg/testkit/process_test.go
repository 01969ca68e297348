package testkit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

// recorder is a testing.TB that records failures and cleanups instead of
// failing and cleaning up, so a test can look at what a helper reported.
type recorder struct {
	testing.TB
	errors   []string
	cleanups []func()
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) { r.TB.Fatalf(format, a...) }
func (r *recorder) Failed() bool                   { return len(r.errors) > 0 }
func (r *recorder) Cleanup(f func())               { r.cleanups = append(r.cleanups, f) }

// TestProcessRaceReportFailsTheTest: a program that prints the race
// detector's report fails the test that ran it; one that does not, does
// not.
func TestProcessRaceReportFailsTheTest(t *testing.T) {
	tests := []struct {
		name, output string
		wantErrors   int
	}{
		{"race reported", "==================\n" + testkit.RaceReport + "\nRead at 0x00c000 by goroutine 7:\n", 1},
		{"no race", "all good\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			p := testkit.StartProcess(r, "/bin/sh", "-c", `printf '%s' "$0"`, tc.output)
			testkit.Eventually(t, 10*time.Second, func() error {
				if exited, _ := p.Exited(); !exited {
					return fmt.Errorf("pid %d still runs", p.Pid())
				}
				return nil
			})
			for i := len(r.cleanups) - 1; i >= 0; i-- {
				r.cleanups[i]()
			}
			if len(r.errors) != tc.wantErrors {
				t.Fatalf("errors %q, want %d", r.errors, tc.wantErrors)
			}
		})
	}
}
