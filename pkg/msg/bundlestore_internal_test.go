package msg

import (
	"testing"
	"time"
)

func TestStoreStateFresh(t *testing.T) {
	now := time.Now()
	day := 24 * time.Hour
	full := storeState{first: 1001, last: 2000, bytes: 1000, maxBytes: 1000, maxAge: 8 * day}
	half := storeState{first: 1, last: 500, bytes: 500, maxBytes: 1000, maxAge: 8 * day}
	for _, tc := range []struct {
		name   string
		st     storeState
		p      placement
		fresh  bool // by 1/2
		fresh4 bool // by 3/4
	}{
		{"new, stream full", full, placement{seq: 1990, at: now}, true, true},
		{"newer half, stream full", full, placement{seq: 1600, at: now}, true, false},
		{"older half, stream full", full, placement{seq: 1400, at: now}, false, false},
		{"discarded", full, placement{seq: 900, at: now}, false, false},
		{"oldest, stream half full", half, placement{seq: 1, at: now}, true, false},
		{"newest, stream half full", half, placement{seq: 499, at: now}, true, true},
		{"written after the state was read", full, placement{seq: 2100, at: now}, true, true},
		{"a day old", full, placement{seq: 1990, at: now.Add(-day - time.Minute)}, true, false},
		{"three days old", full, placement{seq: 1990, at: now.Add(-3 * day)}, false, false},
		{"no cap, no age limit", storeState{first: 1, last: 1 << 20, bytes: 1 << 40}, placement{seq: 1, at: now.Add(-100 * day)}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.fresh(tc.p, now); got != tc.fresh {
				t.Errorf("fresh = %v, want %v", got, tc.fresh)
			}
			if got := tc.st.freshBy(tc.p, now, 0.75); got != tc.fresh4 {
				t.Errorf("fresh by 3/4 = %v, want %v", got, tc.fresh4)
			}
		})
	}
}
