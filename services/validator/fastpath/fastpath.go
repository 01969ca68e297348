// Package fastpath proves an HAProxy bundle valid from what changed since a
// bundle `haproxy -c` accepted (the base), without running haproxy.
//
// Contract: Prove returns nil only when every difference between base and
// candidate is a runtime value whose new form HAProxy is known to accept:
//   - a `server` line of a backend or listen section that keeps its name and
//     every option, and changes only its address (an IPv4 literal, or an
//     IPv6 literal in brackets), its port (1-65535), `weight N` (0-256) and
//     its `disabled`/`enabled` state;
//   - the lines of a map file (kind map) that the main configuration uses
//     only in ways Prove classifies (the map converters map, map_<match> and
//     map_<match>_<output>; an ACL's `-f <file> -m <match>`), each line
//     valid for every such use: an IP or CIDR key for ip, an integer for
//     int and len and for an _int output, an IP for an _ip output, a regular
//     expression of a conservative subset for reg;
//   - a certificate file (kind cert, or a file the configuration names after
//     `crt`): PEM certificates with SHA-2 signatures and one private key
//     (RSA of 2048 bits or more, ECDSA P-256/P-384) matching the first.
//
// Anything else (another line, a file added, removed or of another kind, a
// use of a map that is not classified) is ErrFullCheck: only the whole
// check can decide. Prove never says "invalid": a value it refuses is
// ErrFullCheck too, and the whole check gives the verdict. Prove is pure and
// safe for concurrent use.
package fastpath

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/weftio/weft/pkg/msg"
)

// ErrFullCheck: the difference cannot be proven valid from its values; the
// whole check decides.
var ErrFullCheck = errors.New("needs the full check")

// Result counts the runtime values Prove checked.
type Result struct {
	Servers  int // server lines changed
	MapLines int // map lines changed or added
	Certs    int // certificate files changed
}

// Prove decides whether cand, which differs from base (a bundle the whole
// check accepted), is valid from the values that changed. It returns what
// it checked, or an error wrapping ErrFullCheck that says why not.
func Prove(base, cand msg.Bundle) (Result, error) {
	var res Result
	if base.Target != cand.Target || base.Base != cand.Base || base.Main != cand.Main {
		return res, fullf("target, base folder or main file changed")
	}
	if len(base.Files) != len(cand.Files) {
		return res, fullf("files added or removed")
	}
	var baseMain, candMain []byte
	for i, bf := range base.Files {
		cf := cand.Files[i]
		if bf.Path != cf.Path || bf.Kind != cf.Kind {
			return res, fullf("files added, removed or of another kind (%s)", cf.Path)
		}
		if bf.Path == base.Main {
			baseMain, candMain = bf.Content, cf.Content
		}
	}
	if baseMain == nil {
		return res, fullf("no main file %s", base.Main)
	}
	n, err := diffServers(baseMain, candMain)
	if err != nil {
		return res, err
	}
	res.Servers = n
	var uses map[string][]use
	for i, bf := range base.Files {
		cf := cand.Files[i]
		if bf.Path == base.Main || bytes.Equal(bf.Content, cf.Content) {
			continue
		}
		abs := path.Join(base.Base, cf.Path)
		switch {
		case cf.Kind == msg.FileMap:
			if uses == nil {
				uses = mapUses(candMain)
			}
			n, err := checkMap(cf.Path, bf.Content, cf.Content, uses[abs])
			if err != nil {
				return res, err
			}
			res.MapLines += n
		case cf.Kind == msg.FileCert || namedAsCrt(candMain, abs):
			if err := checkCert(cf.Content); err != nil {
				return res, fullf("%s: %v", cf.Path, err)
			}
			res.Certs++
		default:
			return res, fullf("%s (kind %s) changed", cf.Path, cf.Kind)
		}
	}
	return res, nil
}

func fullf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFullCheck, fmt.Sprintf(format, args...))
}

// namedAsCrt reports whether the configuration names file abs after crt
// (bind ... crt <file>, server ... crt <file>).
func namedAsCrt(cfg []byte, abs string) bool {
	for line := range bytes.Lines(cfg) {
		f := strings.Fields(string(line))
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "crt" && f[i+1] == abs {
				return true
			}
		}
	}
	return false
}

// diffServers compares two main configurations line by line: they must
// have the same lines but for server lines whose runtime values changed,
// each of which must be valid. It returns how many server lines changed.
// Equal runs are skipped by comparing the files (eachDiffering), so a
// change costs a comparison of the files, not a split of them, however far
// apart the changed lines are (a base several renders old differs in one
// place per change since).
func diffServers(base, cand []byte) (int, error) {
	n := 0
	same, err := eachDiffering(base, cand, func(ia, ib int, bl, cl []byte) error {
		lineNo := func() int { return bytes.Count(base[:ia], []byte("\n")) + 1 }
		if s := sectionAt(cand[:ib+len(cl)]); s != "backend" && s != "listen" {
			return fullf("main configuration line %d changed outside a backend", lineNo())
		}
		if err := serverChange(string(bl), string(cl)); err != nil {
			return fmt.Errorf("main configuration line %d: %w", lineNo(), err)
		}
		n++
		return nil
	})
	if err != nil && sameLines(base, cand) {
		return 0, err
	}
	if err != nil || !same {
		return 0, fullf("main configuration: lines added or removed")
	}
	return n, nil
}

// sameLines reports whether a and b have as many lines, the last ended by
// a newline in both or in neither.
func sameLines(a, b []byte) bool {
	return (len(a) == 0) == (len(b) == 0) && bytes.Count(a, []byte("\n")) == bytes.Count(b, []byte("\n")) && endsLine(a) == endsLine(b)
}

// eachDiffering pairs the lines of a and b by position and calls f, in
// order, for each pair that differs, with where each line starts and the
// lines without their newline. It reports whether a and b have as many
// lines, the last ended by a newline in both or in neither; when they do
// not, f may have been called for pairs before the first line that tells.
// It stops at f's first error and returns it (the report then means
// nothing).
func eachDiffering(a, b []byte, f func(ia, ib int, la, lb []byte) error) (bool, error) {
	i, j := 0, 0 // line starts; every line before them is equal in pairs
	for {
		// Skip what is equal, in blocks, then byte by byte.
		p, q := i, j
		for p+chunk <= len(a) && q+chunk <= len(b) && bytes.Equal(a[p:p+chunk], b[q:q+chunk]) {
			p, q = p+chunk, q+chunk
		}
		for p < len(a) && q < len(b) && a[p] == b[q] {
			p, q = p+1, q+1
		}
		if p == len(a) && q == len(b) {
			return true, nil
		}
		// Back to the start of the line the first difference is in.
		back := p - (i + bytes.LastIndexByte(a[i:p], '\n') + 1)
		i, j = p-back, q-back
		la, lb := lineAt(a, i), lineAt(b, j)
		if len(la) == 0 || len(lb) == 0 || endsLine(la) != endsLine(lb) {
			return false, nil // one ended, or only one line has its newline
		}
		if err := f(i, j, bytes.TrimSuffix(la, []byte("\n")), bytes.TrimSuffix(lb, []byte("\n"))); err != nil {
			return true, err
		}
		i, j = i+len(la), j+len(lb)
	}
}

// lineAt is the line of b that starts at i, with its newline if it has
// one; empty at the end of b.
func lineAt(b []byte, i int) []byte {
	if e := bytes.IndexByte(b[i:], '\n'); e >= 0 {
		return b[i : i+e+1]
	}
	return b[i:]
}

// middle returns where the longest common prefix of whole lines of a and
// b ends, and what of a and b lies between it and their longest common
// suffix of whole lines (each a run of whole lines, possibly empty).
func middle(a, b []byte) (int, []byte, []byte) {
	p := 0
	for n := min(len(a), len(b)); p+chunk <= n && bytes.Equal(a[p:p+chunk], b[p:p+chunk]); {
		p += chunk
	}
	for p < len(a) && p < len(b) && a[p] == b[p] {
		p++
	}
	p = bytes.LastIndexByte(a[:p], '\n') + 1
	s := 0
	for n := min(len(a), len(b)) - p; s+chunk <= n && bytes.Equal(a[len(a)-s-chunk:len(a)-s], b[len(b)-s-chunk:len(b)-s]); {
		s += chunk
	}
	for s < len(a)-p && s < len(b)-p && a[len(a)-1-s] == b[len(b)-1-s] {
		s++
	}
	// The suffix starts at a line start of both: past the first newline
	// in it unless it starts right after one.
	ae, be := len(a)-s, len(b)-s
	if s > 0 && (!(ae == p || a[ae-1] == '\n') || !(be == p || b[be-1] == '\n')) {
		if i := bytes.IndexByte(a[ae:], '\n'); i >= 0 {
			ae, be = ae+i+1, be+i+1
		} else {
			ae, be = len(a), len(b)
		}
	}
	return p, a[p:ae], b[p:be]
}

// chunk is how many bytes middle compares at once (bytes.Equal is
// vectorized) before it looks for the first differing byte.
const chunk = 4096

func endsLine(b []byte) bool { return len(b) > 0 && b[len(b)-1] == '\n' }

// splitLines splits a run of whole lines (the last one maybe without its
// newline); an empty run has no lines.
func splitLines(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

// sectionAt is the keyword of the section the text before ends in: the
// first word of its last line that starts in the first column.
func sectionAt(before []byte) string {
	for end := len(before); end > 0; {
		start := bytes.LastIndexByte(before[:end-1], '\n') + 1
		if line := before[start:end]; len(line) > 0 && line[0] != ' ' && line[0] != '\t' && line[0] != '\n' {
			return strings.ToLower(firstField(line))
		}
		end = start
	}
	return ""
}

func firstField(b []byte) string {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return ""
	}
	return string(f[0])
}

// server is the runtime part of a server line and the rest of its options.
type server struct {
	name, addr string
	weight     string // "" when not set
	state      string // "", "disabled" or "enabled"
	rest       []string
}

// parseServer reads a `server <name> <addr> [options]` line. Lines HAProxy
// would read differently from their words (quotes, escapes, comments,
// environment variables) are not parsed.
func parseServer(line string) (server, error) {
	var s server
	if strings.ContainsAny(line, "\"'\\#$\r") {
		return s, fullf("server line with quotes, escapes, comments or variables")
	}
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "server" {
		return s, fullf("not a server line")
	}
	s.name, s.addr = f[1], f[2]
	for i := 3; i < len(f); i++ {
		switch f[i] {
		case "weight":
			if s.weight != "" || i+1 == len(f) {
				return s, fullf("server %s: weight twice or without a value", s.name)
			}
			s.weight = f[i+1]
			i++
		case "disabled", "enabled":
			if s.state != "" {
				return s, fullf("server %s: state twice", s.name)
			}
			s.state = f[i]
		default:
			s.rest = append(s.rest, f[i])
		}
	}
	return s, nil
}

// serverChange checks that a server line changed only in runtime values
// and that the new ones are valid.
func serverChange(base, cand string) error {
	b, err := parseServer(base)
	if err != nil {
		return err
	}
	c, err := parseServer(cand)
	if err != nil {
		return err
	}
	if b.name != c.name || !slices.Equal(b.rest, c.rest) {
		return fullf("server line changed beyond its address, port, weight and state")
	}
	if err := checkServerAddr(c.addr); err != nil {
		return fullf("server %s: %v", c.name, err)
	}
	if c.weight != "" {
		if w, ok := smallInt(c.weight, 3); !ok || w > 256 {
			return fullf("server %s: weight %q is not 0-256", c.name, c.weight)
		}
	}
	return nil
}
