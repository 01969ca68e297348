package files

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

const (
	// manifestName is the file in Dest listing what the driver owns.
	manifestName = ".weft-manifest.json"
	// stagePrefix starts every temporary entry the driver creates in Dest.
	stagePrefix = ".weft-stage-"
)

// checkPath reports whether p is usable as a bundle path: relative,
// slash-separated, clean, without "..", and not one of the driver's own names.
func checkPath(p string) error {
	var reason string
	switch {
	case p == "":
		reason = "empty"
	case strings.HasPrefix(p, "/"):
		reason = "absolute"
	case strings.ContainsAny(p, "\\\x00"):
		reason = "contains a backslash or NUL"
	case p == "." || !fs.ValidPath(p):
		reason = "not a clean relative path (no \"..\", \".\" or empty elements, no trailing slash)"
	default:
		first, _, _ := strings.Cut(p, "/")
		if first == manifestName || strings.HasPrefix(first, stagePrefix) {
			reason = "reserved for the driver"
		}
	}
	if reason != "" {
		return fmt.Errorf("%w: %q: %s", ErrBadPath, p, reason)
	}
	return nil
}

// checkBundle validates every path of the bundle, and that no path is given
// twice or is both a file and a directory.
func checkBundle(files []File) error {
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		if err := checkPath(f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("%w: %q: given twice", ErrBadPath, f.Path)
		}
		seen[f.Path] = true
	}
	for _, f := range files {
		for _, a := range ancestors(f.Path) {
			if seen[a] {
				return fmt.Errorf("%w: %q: %q is a file in the bundle, so it cannot be a directory", ErrBadPath, f.Path, a)
			}
		}
	}
	return nil
}

// ancestors returns the directories above p, outermost first:
// "a/b/c" gives "a", "a/b".
func ancestors(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// deepestFirst sorts paths so that an entry comes before its parents.
func deepestFirst(paths []string) {
	slices.SortFunc(paths, func(a, b string) int {
		if d := strings.Count(b, "/") - strings.Count(a, "/"); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
}

// shellQuote returns s as one shell word, quoting it only when needed.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=+,@%-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
