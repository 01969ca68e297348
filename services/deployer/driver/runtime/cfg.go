package runtime

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// sectionKeywords start a section in HAProxy 2.6's configuration.
var sectionKeywords = map[string]bool{
	"global": true, "defaults": true, "frontend": true, "backend": true, "listen": true,
	"peers": true, "resolvers": true, "userlist": true, "mailers": true, "program": true,
	"http-errors": true, "ring": true, "cache": true, "fcgi-app": true,
}

// cfgLine is one meaningful line: its number in the file and its words, as
// written (quotes and backslashes kept, comments dropped).
type cfgLine struct {
	num   int
	words []string
}

func (l cfgLine) String() string { return strings.Join(l.words, " ") }

// section is a section header and its lines. Lines before the first header
// form a section with an empty kind.
type section struct {
	kind, name string
	header     cfgLine
	lines      []cfgLine
}

// config is a parsed haproxy.cfg.
type config struct {
	sections []section
	// conditional is set when the file uses .if/.elif/.else/.endif blocks:
	// which lines HAProxy uses then depends on the environment, so no
	// line can be read on its own.
	conditional bool
}

// parseConfig splits a configuration into sections and lines of words.
// It is not a validator: anything it does not understand is compared as
// text, so that an unknown construct can only cause a reload.
func parseConfig(b []byte) config {
	var c config
	cur := section{}
	for i, raw := range strings.Split(string(b), "\n") {
		words := splitWords(raw)
		if len(words) == 0 {
			continue
		}
		l := cfgLine{num: i + 1, words: words}
		switch words[0] {
		case ".if", ".elif", ".else", ".endif":
			c.conditional = true
		}
		if sectionKeywords[words[0]] {
			if cur.kind != "" || len(cur.lines) > 0 {
				c.sections = append(c.sections, cur)
			}
			cur = section{kind: words[0], header: l}
			if len(words) > 1 {
				cur.name = words[1]
			}
			continue
		}
		cur.lines = append(cur.lines, l)
	}
	if cur.kind != "" || len(cur.lines) > 0 {
		c.sections = append(c.sections, cur)
	}
	return c
}

// splitWords splits a line the way HAProxy does, keeping each word's raw
// text: words are separated by unquoted, unescaped blanks, and an unquoted,
// unescaped '#' starts a comment.
func splitWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\\' && quote != '\'' && i+1 < len(line):
			cur.WriteByte(ch)
			cur.WriteByte(line[i+1])
			i++
			inWord = true
		case quote != 0:
			cur.WriteByte(ch)
			if ch == quote {
				quote = 0
			}
		case ch == '"' || ch == '\'':
			quote = ch
			cur.WriteByte(ch)
			inWord = true
		case ch == '#':
			if inWord {
				words = append(words, cur.String())
			}
			return words
		case ch == ' ' || ch == '\t' || ch == '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// server is what the Runtime API can change on a server line.
type server struct {
	addr    netip.Addr // invalid when the address is not a literal IP
	port    int        // 0 when absent or not a plain number
	rawAddr string
	weight  int // -1 when not given on the line
	// state is "disabled", "enabled" or "" (not given).
	state string
	// rest are the other words, in order.
	rest []string
}

// parseServer reads "server <name> <address> [params]".
func parseServer(words []string) (server, error) {
	if len(words) < 3 {
		return server{}, fmt.Errorf("server line %q has no address", strings.Join(words, " "))
	}
	s := server{rawAddr: words[2], weight: -1}
	s.addr, s.port = parseAddress(words[2])
	for i := 3; i < len(words); i++ {
		switch w := words[i]; w {
		case "weight":
			if i+1 >= len(words) {
				return server{}, fmt.Errorf("server %s: weight without a value", words[1])
			}
			n, err := strconv.Atoi(words[i+1])
			if err != nil || n < 0 || n > 256 {
				return server{}, fmt.Errorf("server %s: weight %q is not a number from 0 to 256", words[1], words[i+1])
			}
			s.weight = n
			i++
		case "disabled", "enabled":
			s.state = w
		default:
			s.rest = append(s.rest, w)
		}
	}
	return s, nil
}

// parseAddress reads a literal "ip:port" (IPv6 as "[ip]:port" or with its
// last colon before the port, as HAProxy reads it), optionally prefixed with
// "ipv4@" or "ipv6@". Anything else (names, variables, port ranges or
// offsets, other families) gives an invalid address.
func parseAddress(a string) (netip.Addr, int) {
	if rest, ok := strings.CutPrefix(a, "ipv4@"); ok {
		a = rest
	} else if rest, ok := strings.CutPrefix(a, "ipv6@"); ok {
		a = rest
	}
	var host, port string
	if strings.HasPrefix(a, "[") {
		end := strings.Index(a, "]")
		if end < 0 || !strings.HasPrefix(a[end+1:], ":") {
			return netip.Addr{}, 0
		}
		host, port = a[1:end], a[end+2:]
	} else {
		i := strings.LastIndexByte(a, ':')
		if i < 0 {
			return netip.Addr{}, 0
		}
		host, port = a[:i], a[i+1:]
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, 0
	}
	if port == "" || strings.TrimLeft(port, "0123456789") != "" {
		return netip.Addr{}, 0
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return netip.Addr{}, 0
	}
	return ip.Unmap(), p
}

// serverChange is one server line whose runtime settings changed.
type serverChange struct {
	backend, name string
	old, new      server
}

// structureError tells why two configurations differ in structure.
type structureError struct{ detail string }

func (e *structureError) Error() string { return e.detail }

func structuref(format string, args ...any) error {
	return &structureError{detail: fmt.Sprintf(format, args...)}
}

// diffConfig compares two configurations. It returns the server changes
// when they are the only differences, or a *structureError.
func diffConfig(oldB, newB []byte) ([]serverChange, error) {
	return diffConfigKnowing(oldB, newB, nil)
}

// diffConfigKnowing is diffConfig with what facts knows of oldB's lines.
func diffConfigKnowing(oldB, newB []byte, facts *lineFacts) ([]serverChange, error) {
	if changes, ok, err := diffConfigLines(oldB, newB, facts); ok {
		return changes, err
	}
	return diffConfigParsed(oldB, newB)
}

// diffConfigParsed is diffConfig on both files parsed whole.
func diffConfigParsed(oldB, newB []byte) ([]serverChange, error) {
	oldC, newC := parseConfig(oldB), parseConfig(newB)
	if oldC.conditional || newC.conditional {
		return nil, structuref("conditional blocks (.if) in the configuration")
	}
	if len(oldC.sections) != len(newC.sections) {
		return nil, structuref("sections changed (%d before, %d now)", len(oldC.sections), len(newC.sections))
	}
	defaultsTouch := touchesServerDefaults(oldC) || touchesServerDefaults(newC)
	var changes []serverChange
	for i := range oldC.sections {
		o, n := oldC.sections[i], newC.sections[i]
		where := sectionName(n)
		if !slices.Equal(o.header.words, n.header.words) {
			return nil, structuref("section %q became %q (line %d)", o.header, n.header, n.header.num)
		}
		if len(o.lines) != len(n.lines) {
			return nil, structuref("%s: lines added or removed", where)
		}
		for j := range o.lines {
			ol, nl := o.lines[j], n.lines[j]
			if slices.Equal(ol.words, nl.words) {
				continue
			}
			isServer := (n.kind == "backend" || n.kind == "listen") &&
				ol.words[0] == "server" && nl.words[0] == "server" &&
				len(ol.words) > 1 && len(nl.words) > 1 && ol.words[1] == nl.words[1]
			if !isServer {
				return nil, structuref("%s: line %d %q changed", where, nl.num, nl)
			}
			ch, err := diffServer(n.name, ol, nl, defaultsTouch)
			if err != nil {
				return nil, err
			}
			changes = append(changes, ch)
		}
	}
	return changes, nil
}

func sectionName(s section) string {
	if s.kind == "" {
		return "the lines before the first section"
	}
	return s.kind + " " + s.name
}

// touchesServerDefaults reports whether a default-server line sets what the
// driver would otherwise take as the default (weight 1, enabled).
func touchesServerDefaults(c config) bool {
	for _, s := range c.sections {
		for _, l := range s.lines {
			if l.words[0] != "default-server" {
				continue
			}
			for _, w := range l.words[1:] {
				if w == "weight" || w == "disabled" || w == "enabled" {
					return true
				}
			}
		}
	}
	return false
}

func diffServer(backend string, ol, nl cfgLine, defaultsTouch bool) (serverChange, error) {
	name := nl.words[1]
	where := fmt.Sprintf("backend %s: server %s (line %d)", backend, name, nl.num)
	o, err := parseServer(ol.words)
	if err != nil {
		return serverChange{}, structuref("%s: %v", where, err)
	}
	n, err := parseServer(nl.words)
	if err != nil {
		return serverChange{}, structuref("%s: %v", where, err)
	}
	if !slices.Equal(o.rest, n.rest) {
		return serverChange{}, structuref("%s: settings other than address, weight and state changed", where)
	}
	if o.rawAddr != n.rawAddr {
		if !o.addr.IsValid() || !n.addr.IsValid() {
			return serverChange{}, structuref("%s: address %q to %q is not a change between literal ip:port addresses", where, o.rawAddr, n.rawAddr)
		}
	}
	if o.weight != n.weight && (o.weight < 0 || n.weight < 0) && defaultsTouch {
		return serverChange{}, structuref("%s: weight given on one side only while default-server sets weights or states", where)
	}
	if o.state != n.state && (o.state == "" || n.state == "") && defaultsTouch {
		return serverChange{}, structuref("%s: state given on one side only while default-server sets weights or states", where)
	}
	return serverChange{backend: backend, name: name, old: o, new: n}, nil
}

// effectiveWeight is the weight a server runs with when default-server does
// not set one.
func (s server) effectiveWeight() int {
	if s.weight < 0 {
		return 1
	}
	return s.weight
}

func (s server) disabled() bool { return s.state == "disabled" }

// ops returns the Runtime API commands that turn the old server into
// the new one. A server leaving service is put in maintenance first, before
// its address changes; one entering service gets its address and weight
// first and is made ready last, so no request reaches a half-set slot.
func (c serverChange) ops() []op {
	id := c.backend + "/" + c.name
	var ops []op
	goesDown := c.new.disabled() && !c.old.disabled()
	goesUp := !c.new.disabled() && c.old.disabled()
	if goesDown {
		ops = append(ops, stateOp(id, "maint"))
	}
	if c.old.rawAddr != c.new.rawAddr && (c.old.addr != c.new.addr || c.old.port != c.new.port) {
		cmd := fmt.Sprintf("set server %s addr %s port %d", id, c.new.addr, c.new.port)
		ops = append(ops, op{cmd: cmd, show: cmd, ok: addrAccepted})
	}
	if c.old.effectiveWeight() != c.new.effectiveWeight() {
		cmd := fmt.Sprintf("set server %s weight %d", id, c.new.effectiveWeight())
		ops = append(ops, op{cmd: cmd, show: cmd, ok: emptyAnswer})
	}
	if goesUp {
		ops = append(ops, stateOp(id, "ready"))
	}
	return ops
}

func stateOp(id, state string) op {
	cmd := "set server " + id + " state " + state
	return op{cmd: cmd, show: cmd, ok: emptyAnswer}
}

// addrAccepted recognizes the answers of "set server ... addr" that report
// success: "IP changed from ...", "port changed from ...", "no need to
// change the addr ...".
func addrAccepted(out string) bool {
	l := strings.ToLower(out)
	return strings.Contains(l, "changed from") || strings.HasPrefix(l, "no need to change")
}
