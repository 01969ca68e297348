package runtime

import (
	"fmt"
	"github.com/weftio/weft/services/deployer/driver/internal/mapfile"
	"strconv"
	"strings"
)

// mapEntry is one line of a map file.
type mapEntry = mapfile.Entry

// mapPlan is how a map's content changes at runtime.
type mapPlan struct {
	// replace: load the whole new content into a new version and commit
	// it (used when the entries cannot be patched in file order).
	replace bool
	adds    []mapEntry
	sets    []mapEntry
	dels    []string
}

// diffMap plans the change of a map from old to new: the runtime patch
// (mapfile.Diff), or a full replace when no patch reproduces the file or
// the patch is longer than the map itself (loading it then costs less).
func diffMap(oldM, newM []mapEntry, orderMatters bool) mapPlan {
	p, why := mapfile.Diff(oldM, newM, orderMatters)
	if why != "" || p.Size() > len(newM)+2 {
		return mapPlan{replace: true}
	}
	return mapPlan{adds: p.Adds, sets: p.Sets, dels: p.Dels}
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
			cmd:  "add map " + escapeArg(ref) + " " + escapeArg(e.Key) + " " + escapeArg(e.Value),
			show: "add map " + shown + " " + e.Key + " " + e.Value,
			ok:   emptyAnswer,
		})
	}
	for _, e := range p.sets {
		ops = append(ops, op{
			cmd:  "set map " + escapeArg(ref) + " " + escapeArg(e.Key) + " " + escapeArg(e.Value),
			show: "set map " + shown + " " + e.Key + " " + e.Value,
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
		line := e.Key
		if e.Value != "" {
			line += " " + e.Value
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
