package validator

import (
	"testing"
	"time"
)

// TestConfirmerSpacesWholeChecks: a target's next whole check starts no
// sooner than the gap after its last one ended, nor sooner than twice that
// check's length; another target's job is not held up by it.
func TestConfirmerSpacesWholeChecks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	gap := 2 * time.Second
	type step struct {
		at       time.Duration // since t0
		wantOK   bool
		want     string // target taken
		wantWait time.Duration
	}
	tests := []struct {
		name    string
		checked map[string][2]time.Duration // target: start, end of its last whole check
		jobs    []string
		steps   []step
	}{
		{name: "never checked: at once", jobs: []string{"a"},
			steps: []step{{at: 0, wantOK: true, want: "a"}}},
		{name: "a short check: the gap", checked: map[string][2]time.Duration{"a": {0, 300 * time.Millisecond}}, jobs: []string{"a"},
			steps: []step{
				{at: 1300 * time.Millisecond, wantWait: time.Second},
				{at: 2300 * time.Millisecond, wantOK: true, want: "a"},
			}},
		{name: "a long check: twice its length", checked: map[string][2]time.Duration{"a": {0, 3 * time.Second}}, jobs: []string{"a"},
			steps: []step{
				{at: 5 * time.Second, wantWait: 4 * time.Second},
				{at: 9 * time.Second, wantOK: true, want: "a"},
			}},
		{name: "another target goes first", checked: map[string][2]time.Duration{"a": {0, 300 * time.Millisecond}}, jobs: []string{"a", "b"},
			steps: []step{
				{at: 500 * time.Millisecond, wantOK: true, want: "b"},
				{at: 500 * time.Millisecond, wantWait: 1800 * time.Millisecond},
			}},
		{name: "nothing due", steps: []step{{at: 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newConfirmer()
			for target, se := range tc.checked {
				c.checked(target, t0.Add(se[0]), t0.Add(se[1]), gap)
			}
			for i, target := range tc.jobs {
				c.add(confirmJob{target: target, version: uint64(i + 1)})
			}
			for _, s := range tc.steps {
				j, wait, ok := c.next(t0.Add(s.at))
				if ok != s.wantOK || j.target != s.want || wait != s.wantWait {
					t.Fatalf("at %v: next = %q, wait %v, ok %v; want %q, wait %v, ok %v", s.at, j.target, wait, ok, s.want, s.wantWait, s.wantOK)
				}
			}
		})
	}
}
