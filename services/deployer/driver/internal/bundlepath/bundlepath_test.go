package bundlepath

import (
	"strings"
	"testing"
)

func TestReason(t *testing.T) {
	for p, want := range map[string]string{
		"haproxy.cfg": "", "maps/host.map": "",
		"": "empty", "/etc/x": "absolute", "a\\b": "backslash", "a\nb": "line break",
		"../x": "not a clean", "a/./b": "not a clean", "a//b": "not a clean", "a/": "not a clean", ".": "not a clean",
	} {
		got := Reason(p)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("Reason(%q) = %q, want %q", p, got, want)
		}
	}
}

func TestConflict(t *testing.T) {
	cases := []struct {
		paths      []string
		path, want string
	}{
		{[]string{"a", "maps/b"}, "", ""},
		{[]string{"a", "a"}, "a", "given twice"},
		{[]string{"maps", "maps/b"}, "maps/b", `"maps" is a file`},
	}
	for _, tc := range cases {
		p, why := Conflict(tc.paths)
		if p != tc.path || !strings.Contains(why, tc.want) {
			t.Errorf("Conflict(%v) = %q %q, want %q %q", tc.paths, p, why, tc.path, tc.want)
		}
	}
	if got := Ancestors("a/b/c"); len(got) != 2 || got[0] != "a" || got[1] != "a/b" {
		t.Errorf("Ancestors = %v", got)
	}
}
