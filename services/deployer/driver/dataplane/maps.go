package dataplane

import (
	"regexp"
	"strings"
)

// mapEntry is one line of a map file.
type mapEntry struct{ key, value string }

// parseMap reads a map file as HAProxy does: a line starting with '#' is
// ignored, leading blanks are skipped, an empty line is ignored, the key runs
// to the first blank or CR, and the value is what follows the blanks after
// the key, up to the end of the line or a CR.
func parseMap(b []byte) []mapEntry {
	var out []mapEntry
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
		out = append(out, mapEntry{key: key, value: value})
	}
	return out
}

// mapPatch is how a loaded map's entries change at runtime.
type mapPatch struct {
	adds, sets []mapEntry
	dels       []string
}

func (p mapPatch) empty() bool { return len(p.adds)+len(p.sets)+len(p.dels) == 0 }

// diffMap plans the runtime change of a map from old to new. It returns a
// reason instead when the runtime entries cannot reproduce the file:
// duplicate keys (the entry endpoints act on all of a key's entries), or an
// order the patch cannot keep (HAProxy keeps existing entries in place and
// appends added ones) while the order matters.
func diffMap(oldM, newM []mapEntry, orderMatters bool) (mapPatch, string) {
	oldIdx, oldDup := indexMap(oldM)
	newIdx, newDup := indexMap(newM)
	if oldDup || newDup {
		return mapPatch{}, "duplicate keys"
	}
	var p mapPatch
	for _, e := range oldM {
		if _, ok := newIdx[e.key]; !ok {
			p.dels = append(p.dels, e.key)
		}
	}
	for _, e := range newM {
		old, ok := oldIdx[e.key]
		switch {
		case !ok:
			p.adds = append(p.adds, e)
		case old != e.value:
			p.sets = append(p.sets, e)
		}
	}
	if orderMatters && !patchKeepsOrder(oldM, newM, oldIdx) {
		return mapPatch{}, "the order of the entries matters and changed"
	}
	return p, ""
}

func indexMap(m []mapEntry) (map[string]string, bool) {
	idx := make(map[string]string, len(m))
	dup := false
	for _, e := range m {
		if _, ok := idx[e.key]; ok {
			dup = true
		}
		idx[e.key] = e.value
	}
	return idx, dup
}

// patchKeepsOrder reports whether patching old (kept entries stay in place,
// added ones are appended) gives new's order.
func patchKeepsOrder(oldM, newM []mapEntry, oldIdx map[string]string) bool {
	newKeys := make(map[string]bool, len(newM))
	for _, e := range newM {
		newKeys[e.key] = true
	}
	want := make([]string, 0, len(newM))
	for _, e := range oldM {
		if newKeys[e.key] {
			want = append(want, e.key)
		}
	}
	for _, e := range newM {
		if _, ok := oldIdx[e.key]; !ok {
			want = append(want, e.key)
		}
	}
	for i, e := range newM {
		if want[i] != e.key {
			return false
		}
	}
	return true
}

// unorderedMatch matches the converters whose lookup does not depend on the
// order of the entries, because HAProxy indexes them in a tree: map/map_str,
// map_beg and map_ip, with any output type. The others walk the entries in
// file order and take the first match.
var unorderedMatch = regexp.MustCompile(`^map(_str|_beg|_ip)?(_(str|int|ip|bin|dbl))?$`)

// neutralUse matches actions that modify a map without matching on it.
var neutralUse = regexp.MustCompile(`^(set-map|del-map)$`)

// mapOrderMatters reports whether a use of the map file with storage name
// name in the configuration depends on the order of its entries: a converter
// argument that is the name or a path ending in "/name". A map the
// configuration does not name as a converter argument is assumed to.
func mapOrderMatters(cfg []byte, name string) bool {
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
		conv := converterName(before[:len(before)-1])
		switch {
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
