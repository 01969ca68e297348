package runtime

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// mapEntry is one line of a map file.
type mapEntry struct{ key, value string }

// parseMap reads a map file as HAProxy 2.6 does: a line starting with '#'
// is ignored, leading blanks are skipped, an empty line is ignored, the key
// runs to the first blank or CR, and the value is what follows the blanks
// after the key, up to the end of the line or a CR.
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

// mapPlan is how a map's content changes at runtime.
type mapPlan struct {
	// replace: load the whole new content into a new version and commit
	// it (used when the entries cannot be patched in file order).
	replace bool
	adds    []mapEntry
	sets    []mapEntry
	dels    []string
}

// diffMap plans the change of a map from old to new. orderMatters is set
// when the map is used with a match whose result depends on the order of
// the entries (see unorderedMatch); then the patch
// must keep the file's order: HAProxy keeps existing entries in place and
// appends added ones.
func diffMap(oldM, newM []mapEntry, orderMatters bool) mapPlan {
	oldIdx, oldDup := indexMap(oldM)
	newIdx, newDup := indexMap(newM)
	if oldDup || newDup {
		// Duplicate keys: set and del act on all of a key's entries, so
		// only a full load reproduces the file.
		return mapPlan{replace: true}
	}
	var p mapPlan
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
		return mapPlan{replace: true}
	}
	// A patch longer than the map itself costs more than loading the map.
	if len(p.adds)+len(p.sets)+len(p.dels) > len(newM)+2 {
		return mapPlan{replace: true}
	}
	return p
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
	var want []string
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
	if len(want) != len(newM) {
		return false
	}
	for i, e := range newM {
		if want[i] != e.key {
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

// mapOrderMatters reports whether any use of the map file named ref in the
// configuration depends on the order of its entries. A map the
// configuration does not name as a converter argument is assumed to.
func mapOrderMatters(cfg []byte, ref string) bool {
	text := string(cfg)
	found := false
	for i := 0; ; {
		j := strings.Index(text[i:], ref)
		if j < 0 {
			break
		}
		at := i + j
		i = at + len(ref)
		// The path must be a whole argument: "(" before it (possibly
		// after blanks), and "," or ")" after it.
		after := strings.TrimLeft(text[at+len(ref):], " \t")
		if after == "" || (after[0] != ',' && after[0] != ')') {
			continue
		}
		before := strings.TrimRight(text[:at], " \t")
		if !strings.HasSuffix(before, "(") {
			continue
		}
		before = before[:len(before)-1]
		k := len(before)
		for k > 0 && isIdentByte(before[k-1]) {
			k--
		}
		name := before[k:]
		switch {
		case neutralUse.MatchString(name):
		case unorderedMatch.MatchString(name):
			found = true
		default:
			return true
		}
	}
	return !found
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// maxPayload bounds the payload of one "add map" command, well below the
// CLI's buffer (tune.bufsize, 16 kB by default).
const maxPayload = 8 << 10

// ops turns the plan into commands for the map HAProxy knows as ref, shown
// with the bundle path.
func (p mapPlan) ops(ref, shown string, newM []mapEntry) []op {
	var ops []op
	if p.replace {
		ops = append(ops, op{
			cmd: "prepare map " + escapeArg(ref), show: "prepare map " + shown,
			ok: func(out string) bool { return strings.HasPrefix(out, "New version created:") },
			// The version is read from the answer and used by the next
			// commands.
			version: true,
		})
		for _, chunk := range chunkEntries(newM, maxPayload) {
			ops = append(ops, op{
				payload: chunk.payload, ok: emptyAnswer,
				withVersion: func(v string) (string, string) {
					return "add map @" + v + " " + escapeArg(ref), fmt.Sprintf("add map @%s %s (%d entries)", v, shown, chunk.n)
				},
			})
		}
		ops = append(ops, op{
			ok: emptyAnswer,
			withVersion: func(v string) (string, string) {
				return "commit map @" + v + " " + escapeArg(ref), "commit map @" + v + " " + shown
			},
		})
		return ops
	}
	// Entries are added and changed before others are removed, so that a
	// key moving to another name is never missing from both.
	for _, e := range p.adds {
		ops = append(ops, op{
			cmd:  "add map " + escapeArg(ref) + " " + escapeArg(e.key) + " " + escapeArg(e.value),
			show: "add map " + shown + " " + e.key + " " + e.value,
			ok:   emptyAnswer,
		})
	}
	for _, e := range p.sets {
		ops = append(ops, op{
			cmd:  "set map " + escapeArg(ref) + " " + escapeArg(e.key) + " " + escapeArg(e.value),
			show: "set map " + shown + " " + e.key + " " + e.value,
			ok:   emptyAnswer,
		})
	}
	for _, k := range p.dels {
		ops = append(ops, op{
			cmd:  "del map " + escapeArg(ref) + " " + escapeArg(k),
			show: "del map " + shown + " " + k,
			ok:   emptyAnswer,
		})
	}
	return ops
}

type payloadChunk struct {
	payload []byte
	n       int
}

// chunkEntries lays entries out as "key value" lines in payloads of at most
// limit bytes (an entry longer than that gets a payload of its own).
func chunkEntries(m []mapEntry, limit int) []payloadChunk {
	var out []payloadChunk
	var cur []byte
	n := 0
	for _, e := range m {
		line := e.key
		if e.value != "" {
			line += " " + e.value
		}
		line += "\n"
		if n > 0 && len(cur)+len(line) > limit {
			out = append(out, payloadChunk{payload: cur, n: n})
			cur, n = nil, 0
		}
		cur = append(cur, line...)
		n++
	}
	if n > 0 {
		out = append(out, payloadChunk{payload: cur, n: n})
	}
	return out
}

// parseVersion reads the answer to "prepare map".
func parseVersion(out string) (string, error) {
	v := strings.TrimSpace(strings.TrimPrefix(out, "New version created:"))
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		return "", fmt.Errorf("unexpected answer %q", out)
	}
	return v, nil
}
