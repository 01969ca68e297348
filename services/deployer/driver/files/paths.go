package files

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/weftio/weft/services/deployer/driver/internal/bundlepath"
)

const (
	// manifestName is the file in Dest listing what an unnamed driver owns.
	manifestName = ".weft-manifest.json"
	// manifestPrefix starts the manifest of every driver, named or not.
	manifestPrefix = ".weft-manifest"
	// stagePrefix starts every temporary entry a driver creates in Dest.
	stagePrefix = ".weft-stage-"
)

// keptSuffix ends the name of a copy kept by Options.KeepStaged.
const keptSuffix = ".weft-stage"

// KeptName is the bundle path of the copy Options.KeepStaged keeps of the
// staged file p: ".<base name>.weft-stage" in p's folder.
func KeptName(p string) string {
	return path.Join(path.Dir(p), "."+path.Base(p)+keptSuffix)
}

// names are the entries of one driver in Dest: its manifest, and the
// prefix of its staging entries. An unnamed driver uses manifestName and
// stagePrefix followed by random text (which has no dot); a driver named N
// uses ".weft-manifest-N.json" and ".weft-stage-N." followed by random
// text, so drivers with different names never touch each other's entries.
type names struct {
	manifest string
	stage    string
	named    bool
}

func newNames(name string) (names, error) {
	if name == "" {
		return names{manifest: manifestName, stage: stagePrefix}, nil
	}
	if strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return names{}, fmt.Errorf("%w: Name %q: only letters, digits, '-' and '_' are allowed", ErrConfig, name)
	}
	return names{manifest: manifestPrefix + "-" + name + ".json", stage: stagePrefix + name + ".", named: true}, nil
}

// ownsStage reports whether the top-level entry called entry is a staging
// entry of this driver.
func (n names) ownsStage(entry string) bool {
	rest, ok := strings.CutPrefix(entry, n.stage)
	return ok && (n.named || !strings.Contains(rest, "."))
}

// checkPath reports whether p is usable as a bundle path (bundlepath.Reason)
// and not one of the driver's own names.
func checkPath(p string) error {
	reason := bundlepath.Reason(p)
	if reason == "" {
		first, _, _ := strings.Cut(p, "/")
		if strings.HasPrefix(first, manifestPrefix) || strings.HasPrefix(first, stagePrefix) {
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
