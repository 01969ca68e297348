package liveconfig

import (
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
)

// TestParseProblemsHaveLines checks a candidate that does not load is
// refused with one problem per configuration problem, each with its line
// and field path.
func TestParseProblemsHaveLines(t *testing.T) {
	_, err := config.Parse([]byte("targets:\n  t:\n    deploy:\n      reload_cmnd: x\n      drift_check: 5\n"), "/")
	got := parseProblems(err)
	want := []msg.Problem{
		{File: "weft.yaml", Line: 4, Severity: "error", Message: `targets.t.deploy.reload_cmnd: unknown field "reload_cmnd"; did you mean "reload_cmd"?`},
		{File: "weft.yaml", Line: 5, Severity: "error", Message: `targets.t.deploy.drift_check: must be a duration like "250ms", "30s" or "1m30s", got 5 (a number needs a unit: 5s?)`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("problem %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
