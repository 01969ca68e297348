// Package bundlepath holds the rules every deploy driver applies to the
// paths of a bundle before it writes anything: relative, slash-separated,
// clean, without "..", and no path both a file and a directory. Drivers add
// their own reserved names and wrap the reasons in their own errors.
package bundlepath

import (
	"io/fs"
	"strings"
)

// Reason says why p cannot be a bundle path, or "" when it can.
func Reason(p string) string {
	switch {
	case p == "":
		return "empty"
	case strings.HasPrefix(p, "/"):
		return "absolute"
	case strings.ContainsAny(p, "\\\x00\n\r"):
		return "contains a backslash, NUL or line break"
	case p == "." || !fs.ValidPath(p):
		return "not a clean relative path (no \"..\", \".\" or empty elements, no trailing slash)"
	}
	return ""
}

// Conflict finds a path given twice, or a path whose ancestor is also a
// file of the bundle; it returns the path and the reason, or "", "".
func Conflict(paths []string) (path, reason string) {
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		if seen[p] {
			return p, "given twice"
		}
		seen[p] = true
	}
	for _, p := range paths {
		for _, a := range Ancestors(p) {
			if seen[a] {
				return p, "\"" + a + "\" is a file in the bundle, so it cannot be a directory"
			}
		}
	}
	return "", ""
}

// Ancestors returns the directories above p, outermost first: "a/b/c"
// gives "a", "a/b".
func Ancestors(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}
