package haproxycheck

import (
	"slices"
	"testing"
)

func TestEnviron(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env, out []string
	}{
		{"none set", []string{"PATH=/bin"}, []string{"PATH=/bin", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
		{"empty environment", nil, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
		{"empty value", []string{"GLIBC_TUNABLES="}, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
		{"other tunables kept", []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2", "HOME=/"},
			[]string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1", "HOME=/"}},
		{"turned off by the user", []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}},
		{"set among others", []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"},
			[]string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"}},
		{"a longer name is another tunable", []string{"GLIBC_TUNABLES=glibc.malloc.hugetlbx=0"},
			[]string{"GLIBC_TUNABLES=glibc.malloc.hugetlbx=0:glibc.malloc.hugetlb=1"}},
		{"a duplicate variable dropped", []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0", "GLIBC_TUNABLES=x=1"},
			[]string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}},
		{"a name that only starts alike", []string{"GLIBC_TUNABLES_X=1"}, []string{"GLIBC_TUNABLES_X=1", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.env)
			if got := Environ(tc.env); !slices.Equal(got, tc.out) {
				t.Errorf("Environ(%q) = %q, want %q", tc.env, got, tc.out)
			}
			if !slices.Equal(in, tc.env) {
				t.Errorf("Environ modified its argument: %q, was %q", tc.env, in)
			}
		})
	}
}

// TestCheckRunsWithHugePages reads the environment haproxy -c runs with
// from inside the check: a conditional block warns with the value of
// GLIBC_TUNABLES that haproxy saw.
func TestCheckRunsWithHugePages(t *testing.T) {
	cfg := `.warning "tunables: [${GLIBC_TUNABLES}]"
defaults
  mode http
  timeout client 1s
  timeout connect 1s
  timeout server 1s
frontend f
  bind 127.0.0.1:9
`
	for _, tc := range []struct {
		name, set, want string
	}{
		{"added", "", "tunables: [glibc.malloc.hugetlb=1]"},
		{"added to others", "glibc.malloc.arena_max=2", "tunables: [glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1]"},
		{"the user's choice kept", "glibc.malloc.hugetlb=0", "tunables: [glibc.malloc.hugetlb=0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GLIBC_TUNABLES", tc.set)
			c, _ := newTestChecker(t)
			got, err := c.Check(t.Context(), []File{{Path: testMain, Content: []byte(cfg)}}, testMain, testBase)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			hasProblem(SeverityWarning, testMain, 1, tc.want)(t, got)
		})
	}
}
