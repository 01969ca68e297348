// Package mapfile is what the deploy drivers know about HAProxy map files:
// how HAProxy reads one (Parse), how one map's entries change into
// another's with runtime add/set/del commands (Diff), and whether the
// configuration's use of a map depends on the order of its entries
// (OrderMatters). It does no I/O.
package mapfile

import (
	"regexp"
	"strings"
)

// Entry is one line of a map file.
type Entry struct{ Key, Value string }

// Parse reads a map file as HAProxy 2.6 does: a line starting with '#' is
// ignored, leading blanks are skipped, an empty line is ignored, the key
// runs to the first blank or CR, and the value is what follows the blanks
// after the key, up to the end of the line or a CR.
func Parse(b []byte) []Entry {
	var out []Entry
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexByte(line, '\r'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimLeft(line, " \t")
		if line == "" {
			continue
		}
		key, value := line, ""
		if i := strings.IndexAny(line, " \t"); i >= 0 {
			key, value = line[:i], strings.TrimLeft(line[i:], " \t")
		}
		out = append(out, Entry{Key: key, Value: value})
	}
	return out
}

// Patch is how a loaded map's entries change at runtime.
type Patch struct {
	Adds, Sets []Entry
	Dels       []string
}

// Size is the number of runtime commands the patch takes.
func (p Patch) Size() int { return len(p.Adds) + len(p.Sets) + len(p.Dels) }

// Diff plans the runtime change of a map from old to new. It returns a
// reason instead when runtime entries cannot reproduce the file: duplicate
// keys (set and del act on all of a key's entries), or an order the patch
// cannot keep (HAProxy keeps existing entries in place and appends added
// ones) while the order matters.
func Diff(oldM, newM []Entry, orderMatters bool) (Patch, string) {
	oldIdx, oldDup := index(oldM)
	newIdx, newDup := index(newM)
	if oldDup || newDup {
		return Patch{}, "duplicate keys"
	}
	var p Patch
	for _, e := range oldM {
		if _, ok := newIdx[e.Key]; !ok {
			p.Dels = append(p.Dels, e.Key)
		}
	}
	for _, e := range newM {
		old, ok := oldIdx[e.Key]
		switch {
		case !ok:
			p.Adds = append(p.Adds, e)
		case old != e.Value:
			p.Sets = append(p.Sets, e)
		}
	}
	if orderMatters && !patchKeepsOrder(oldM, newM, oldIdx) {
		return Patch{}, "the order of the entries matters and changed"
	}
	return p, ""
}

func index(m []Entry) (map[string]string, bool) {
	idx := make(map[string]string, len(m))
	dup := false
	for _, e := range m {
		if _, ok := idx[e.Key]; ok {
			dup = true
		}
		idx[e.Key] = e.Value
	}
	return idx, dup
}

// patchKeepsOrder reports whether patching old (kept entries stay in place,
// added ones are appended) gives new's order.
func patchKeepsOrder(oldM, newM []Entry, oldIdx map[string]string) bool {
	newKeys := make(map[string]bool, len(newM))
	for _, e := range newM {
		newKeys[e.Key] = true
	}
	want := make([]string, 0, len(newM))
	for _, e := range oldM {
		if newKeys[e.Key] {
			want = append(want, e.Key)
		}
	}
	for _, e := range newM {
		if _, ok := oldIdx[e.Key]; !ok {
			want = append(want, e.Key)
		}
	}
	if len(want) != len(newM) {
		return false
	}
	for i, e := range newM {
		if want[i] != e.Key {
			return false
		}
	}
	return true
}

// unorderedMatch matches the converters whose lookup does not depend on the
// order of the entries, because HAProxy indexes them in a tree: map/map_str
// (exact string), map_beg (longest prefix) and map_ip (longest network),
// with any output type. The others (sub, dir, dom, end, reg, regm, int,
// len) walk a list in file order and take the first match.
var unorderedMatch = regexp.MustCompile(`^map(_str|_beg|_ip)?(_(str|int|ip|bin|dbl))?$`)

// neutralUse matches actions that modify a map without matching on it.
var neutralUse = regexp.MustCompile(`^(set-map|del-map)$`)

// OrderMatters reports whether any use of the map file name in the
// configuration depends on the order of its entries. A use is a converter
// or action argument (after "(" and blanks, before "," or ")") that is name
// or a path ending in "/name". A map the configuration does not name as
// such an argument is assumed to depend on its order.
func OrderMatters(cfg []byte, name string) bool {
	text := string(cfg)
	found := false
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			break
		}
		at := i + j
		i = at + len(name)
		after := strings.TrimLeft(text[i:], " \t")
		if after == "" || (after[0] != ',' && after[0] != ')') {
			continue
		}
		start := strings.LastIndexAny(text[:at], "(, \t\n")
		if start < 0 {
			continue
		}
		if arg := text[start+1 : i]; arg != name && !strings.HasSuffix(arg, "/"+name) {
			continue
		}
		before := strings.TrimRight(text[:start+1], " \t")
		if !strings.HasSuffix(before, "(") {
			continue
		}
		switch conv := converterName(before[:len(before)-1]); {
		case neutralUse.MatchString(conv):
		case unorderedMatch.MatchString(conv):
			found = true
		default:
			return true
		}
	}
	return !found
}

// converterName is the identifier that ends s.
func converterName(s string) string {
	k := len(s)
	for k > 0 && isIdentByte(s[k-1]) {
		k--
	}
	return s[k:]
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
