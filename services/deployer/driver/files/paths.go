package files

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weftio/weft/services/deployer/driver/internal/bundlepath"
)

const (
	// manifestName is the file in Dest listing what the driver owns.
	manifestName = ".weft-manifest.json"
	// stagePrefix starts every temporary entry the driver creates in Dest.
	stagePrefix = ".weft-stage-"
)

// checkPath reports whether p is usable as a bundle path (bundlepath.Reason)
// and not one of the driver's own names.
func checkPath(p string) error {
	reason := bundlepath.Reason(p)
	if reason == "" {
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
	paths := make([]string, len(files))
	for i, f := range files {
		if err := checkPath(f.Path); err != nil {
			return err
		}
		paths[i] = f.Path
	}
	if p, why := bundlepath.Conflict(paths); p != "" {
		return fmt.Errorf("%w: %q: %s", ErrBadPath, p, why)
	}
	return nil
}

// ancestors returns the directories above p, outermost first.
func ancestors(p string) []string { return bundlepath.Ancestors(p) }

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
