package kind

import (
	"bufio"
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	parser "github.com/haproxytech/client-native/v6/config-parser"
	"github.com/haproxytech/client-native/v6/config-parser/common"

	"github.com/weftio/weft/pkg/haproxycfg"
	"github.com/weftio/weft/pkg/msg"
)

// Syntax is the name of the syntax kind.
const Syntax = "syntax"

// SyntaxChecker parses the bundle's main configuration with client-native's
// configuration parser (the parser the Dataplane API uses) and checks what
// the parsed structure makes checkable without running HAProxy.
//
// The parser never fails: a line it cannot read (an unknown keyword, or a
// known keyword whose arguments it rejects) is kept as an "unprocessed"
// line, and a line before any section is dropped. The checker maps each
// such line back to its line number and reports it:
//   - an unknown keyword is an error;
//   - a known keyword whose arguments the parser rejects ("server s1",
//     "mode nonsense", "balance bogus", "timeout connect", "bind" without an
//     address, "http-request bogus-action") is an error;
//   - a proxy keyword in a proxy section that does not take it ("balance" in
//     a frontend, "bind" in a backend) is a warning: HAProxy ignores most of
//     them with a warning of its own;
//   - a few keywords HAProxy accepts that the parser does not model
//     ("capture request header", "errorloc", "log-tag" in global, ...) are
//     not reported, and "program" sections are not checked.
//
// On top of that it checks, naming the line: sections without a name or
// with a name HAProxy refuses, duplicate section names (with HAProxy's rules:
// a frontend and a backend may share a name, a listen may not; duplicate
// userlists are a warning), "from" clauses naming a defaults section not
// declared before, duplicate server names in a backend, use_backend and
// default_backend with a static name that no backend or listen section
// defines, unterminated quotes, lines of more than 64 words (HAProxy
// truncates them), lines too long for the parser to read (it silently stops
// there), and references to files below the bundle's Base that the bundle
// does not hold: map converters (map, map_beg, map_str, ...), set-map,
// del-map, add-acl and del-acl actions, "-f" pattern files, errorfile,
// "file"/"lf-file" in return actions and http-error, crt and crt-list
// (relative to crt-base), ca-file and crl-file (relative to ca-base), and
// lua-load.
//
// What only HAProxy knows is left to the haproxy kind: sample fetch,
// converter and ACL names, values the parser does not type (ports out of
// range, durations with unknown units, stick-table types), condition
// syntax, ACLs used but not declared, addresses that do not resolve, and
// certificates that do not load.
type SyntaxChecker struct{}

// Name implements Checker.
func (SyntaxChecker) Name() string { return Syntax }

// Check implements Checker.
func (SyntaxChecker) Check(ctx context.Context, b msg.Bundle) ([]msg.Problem, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("syntax: %w", err)
	}
	var main []byte
	found := false
	for _, f := range b.Files {
		if f.Path == b.Main {
			main, found = f.Content, true
			break
		}
	}
	if !found {
		return []msg.Problem{{File: b.Main, Severity: "error", Message: "main configuration is not in the bundle"}}, nil
	}
	c := scanConfig(b.Main, main)
	s := &syntaxRun{cfg: c}
	if err := s.parse(); err != nil {
		return nil, fmt.Errorf("syntax: %w", err)
	}
	s.lexical()
	s.unprocessed()
	s.sectionNames()
	s.servers()
	s.backendRefs()
	s.fileRefs(b)
	slices.SortStableFunc(s.out, func(a, b msg.Problem) int { return a.Line - b.Line })
	return s.out, nil
}

// maxWords is the number of words HAProxy reads on a line; it truncates
// the rest with an alert.
const maxWords = 64

// sectionTypes are the section keywords the parser knows.
var sectionTypes = map[string]bool{
	"global": true, "defaults": true, "frontend": true, "backend": true, "listen": true,
	"resolvers": true, "userlist": true, "peers": true, "mailers": true, "cache": true,
	"http-errors": true, "ring": true, "log-forward": true, "fcgi-app": true, "crt-store": true,
	"traces": true, "log-profile": true, "acme": true, "healthcheck": true,
}

// unmodelledSections are sections HAProxy knows and the parser does not;
// their lines are not checked.
var unmodelledSections = map[string]bool{"program": true}

// unnamedSections may go without a name.
var unnamedSections = map[string]bool{"global": true, "defaults": true, "traces": true, "crt-store": true}

// proxySections take proxy keywords.
var proxySections = []string{"defaults", "frontend", "backend", "listen"}

// unmodelled lists, per section type, keywords HAProxy accepts that the
// parser does not model (found by checking the keyword lists of HAProxy's
// configuration manual against the parser).
var unmodelled = map[string][][]string{
	"global": words("log-tag", "no-memory-trimming", "stats bind-process",
		"tune.ssl.capture-cipherlist-size", "tune.ssl.hard-maxrecord"),
	"defaults": words("errorloc", "transparent", "option spop-check"),
	"frontend": words("capture cookie", "capture request header", "capture response header", "errorloc"),
	"backend":  words("errorloc", "dispatch", "transparent"),
	"listen": words("capture cookie", "capture request header", "capture response header", "errorloc",
		"dispatch", "transparent", "server-template", "email-alert", "option spop-check"),
}

func words(ks ...string) [][]string {
	out := make([][]string, len(ks))
	for i, k := range ks {
		out[i] = strings.Fields(k)
	}
	return out
}

// section is one section of the configuration.
type section struct {
	typ, name, from string
	line            int
	// key is the name the parser files the section under: "data" for
	// global, a generated name for an unnamed defaults section, and a
	// unique name for a duplicate (the parser would overwrite the first).
	key     string
	renamed bool
}

// directive is one line with words.
type directive struct {
	line   int
	text   string   // the line without surrounding space
	words  []string // the parser's words, without the comment
	sec    int      // index in sections; -1 before any section
	header bool     // the line opens sections[sec]
	bad    bool     // the parser could not read it (set by unprocessed)
}

// haproxyConfig is a configuration split into sections and words the way
// the parser splits it.
type haproxyConfig struct {
	file     string
	content  string
	dirs     []directive
	sections []section
	tooLong  []int // lines the parser's reader cannot read
	unquoted []int // lines ending inside a quote
}

// scanConfig splits content into sections and directives.
func scanConfig(file string, content []byte) *haproxyConfig {
	c := &haproxyConfig{file: file, content: string(content)}
	cur := -1
	keys := map[string]bool{} // typ + "\x00" + key
	for i, raw := range strings.Split(c.content, "\n") {
		n := i + 1
		if len(raw) >= bufio.MaxScanTokenSize {
			c.tooLong = append(c.tooLong, n)
			continue
		}
		line := strings.TrimRight(raw, "\r")
		ws, _ := common.StringSplitWithCommentIgnoreEmpty(line)
		if len(ws) == 0 {
			continue
		}
		if openQuote(line) {
			c.unquoted = append(c.unquoted, n)
		}
		d := directive{line: n, text: strings.TrimSpace(line), words: ws, sec: cur}
		// The parser refuses a section name with a quote and reads the line
		// as a directive of the current section.
		if (sectionTypes[ws[0]] && (len(ws) == 1 || !strings.ContainsAny(ws[1], `"'`))) || unmodelledSections[ws[0]] {
			s := section{typ: ws[0], line: n}
			if len(ws) > 1 {
				s.name = ws[1]
			}
			if len(ws) > 3 && ws[2] == "from" {
				s.from = ws[3]
			}
			s.key = s.name
			switch {
			case s.typ == "global":
				s.key = parser.GlobalSectionName
			case s.typ == "traces":
				s.key = parser.TracesSectionName
			case s.typ == "defaults" && s.name == "":
				for j := 1; ; j++ {
					if s.key = "unnamed_defaults_" + strconv.Itoa(j); !keys[s.typ+"\x00"+s.key] {
						break
					}
				}
			}
			if s.typ != "global" && s.typ != "traces" {
				for j := 0; keys[s.typ+"\x00"+s.key]; j++ {
					s.key, s.renamed = fmt.Sprintf("%s~%d~%d", s.name, n, j), true
				}
			}
			keys[s.typ+"\x00"+s.key] = true
			c.sections = append(c.sections, s)
			cur = len(c.sections) - 1
			d.sec, d.header = cur, true
		}
		c.dirs = append(c.dirs, d)
	}
	return c
}

// openQuote reports whether line ends inside a quote, reading quotes,
// backslash escapes and comments as HAProxy does.
func openQuote(line string) bool {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && quote != '\'':
			i++
		case quote == 0 && c == '#':
			return false
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
		case quote != 0 && c == quote:
			quote = 0
		}
	}
	return quote != 0
}

// parserInput is the text given to the parser: the configuration with
// duplicate sections renamed so that none overwrites another, and lines too
// long for its reader blanked so that it reads past them.
func (c *haproxyConfig) parserInput() string {
	renamed := false
	for _, s := range c.sections {
		renamed = renamed || s.renamed
	}
	if !renamed && len(c.tooLong) == 0 {
		return c.content
	}
	lines := strings.Split(c.content, "\n")
	for _, n := range c.tooLong {
		lines[n-1] = ""
	}
	for _, d := range c.dirs {
		if s := c.sections[max(d.sec, 0)]; d.header && s.renamed {
			ws := slices.Clone(d.words)
			if len(ws) == 1 {
				ws = append(ws, s.key)
			} else {
				ws[1] = s.key
			}
			lines[d.line-1] = strings.Join(ws, " ")
		}
	}
	return strings.Join(lines, "\n")
}

// sectionOf returns the section d is in, or nil.
func (c *haproxyConfig) sectionOf(d directive) *section {
	if d.sec < 0 {
		return nil
	}
	return &c.sections[d.sec]
}

// keywordParser holds one section of every type, to ask which keywords a
// section type has.
var keywordParser = sync.OnceValues(func() (parser.Parser, error) {
	var b strings.Builder
	for t := range sectionTypes {
		fmt.Fprintf(&b, "%s x\n", t)
	}
	return haproxycfg.Parse(b.String())
})

type syntaxRun struct {
	cfg    *haproxyConfig
	parsed parser.Parser
	out    []msg.Problem
}

func (s *syntaxRun) add(line int, sev, f string, args ...any) {
	s.out = append(s.out, msg.Problem{File: s.cfg.file, Line: line, Severity: sev, Message: fmt.Sprintf(f, args...)})
}

func (s *syntaxRun) parse() error {
	p, err := haproxycfg.Parse(s.cfg.parserInput())
	if err != nil {
		return fmt.Errorf("parse %s: %w", s.cfg.file, err)
	}
	s.parsed = p
	return nil
}

// lexical reports what the reader itself gets wrong.
func (s *syntaxRun) lexical() {
	for _, n := range s.cfg.tooLong {
		s.add(n, "error", "line is longer than %d bytes: the configuration parser stops reading there", bufio.MaxScanTokenSize-1)
	}
	for _, n := range s.cfg.unquoted {
		s.add(n, "error", "unterminated quote")
	}
	for _, d := range s.cfg.dirs {
		if len(d.words) > maxWords {
			s.add(d.line, "error", "%d words on one line: HAProxy reads at most %d and truncates the rest", len(d.words), maxWords)
		}
	}
}

// unprocessed maps the lines the parser could not read back to their line
// numbers and says why.
func (s *syntaxRun) unprocessed() {
	// Sections sharing a key (global) share one list, in file order.
	queues := map[string][]string{}
	for _, sec := range s.cfg.sections {
		k := sec.typ + "\x00" + sec.key
		if _, ok := queues[k]; ok || unmodelledSections[sec.typ] {
			continue
		}
		var q []string
		if res, err := s.parsed.GetResult(parser.Section(sec.typ), sec.key, ""); err == nil {
			for _, r := range res {
				q = append(q, r.Data)
			}
		}
		queues[k] = q
	}
	active := "" // the section the parser reads lines into
	for i := range s.cfg.dirs {
		d := &s.cfg.dirs[i]
		sec := s.cfg.sectionOf(*d)
		switch {
		case sec == nil:
			s.add(d.line, "error", "%q is outside any section", d.words[0])
			d.bad = true
			continue
		case unmodelledSections[sec.typ]:
			// The parser reads these lines into the section before.
			if q := queues[active]; len(q) > 0 && q[0] == d.text {
				queues[active] = q[1:]
			}
			continue
		case d.header:
			active = sec.typ + "\x00" + sec.key
			continue
		}
		k := sec.typ + "\x00" + sec.key
		if q := queues[k]; len(q) > 0 && q[0] == d.text {
			queues[k] = q[1:]
			d.bad = true
			s.explain(*d, sec.typ)
		}
	}
}

// explain reports one line the parser could not read.
func (s *syntaxRun) explain(d directive, typ string) {
	ws := d.words
	if ws[0] == "no" && len(ws) > 1 {
		ws = ws[1:]
	}
	for _, u := range unmodelled[typ] {
		if len(ws) >= len(u) && slices.Equal(ws[:len(u)], u) {
			return
		}
	}
	kp, err := keywordParser()
	if err != nil {
		s.add(d.line, "error", "the parser could not read %q", clip(d.text))
		return
	}
	if kw := keyword(kp, typ, ws); kw != "" {
		if sectionTypes[kw] {
			s.add(d.line, "error", "malformed %s section header: %q", kw, clip(d.text))
			return
		}
		s.add(d.line, "error", "invalid arguments for %q: %q", kw, clip(d.text))
		return
	}
	if slices.Contains(proxySections, typ) {
		var in []string
		kw := ""
		for _, other := range proxySections {
			if k := keyword(kp, other, ws); k != "" && other != typ {
				in, kw = append(in, other), k
			}
		}
		if kw != "" {
			s.add(d.line, "warning", "%q is not valid in a %s section (only in %s); HAProxy ignores or refuses it", kw, typ, strings.Join(in, ", "))
			return
		}
	}
	s.add(d.line, "error", "unknown keyword %q in %s section", ws[0], typ)
}

// keyword returns the keyword the parser of section type typ reads ws
// with, or "" when it has none.
func keyword(p parser.Parser, typ string, ws []string) string {
	for i := 1; i <= len(ws); i++ {
		if k := strings.Join(ws[:i], " "); p.HasParser(parser.Section(typ), k) {
			return k
		}
	}
	return ""
}

// validName reports whether HAProxy accepts name for a proxy.
func validName(name string) bool {
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:", c)) {
			return false
		}
	}
	return true
}

// conflicts reports whether sections of types a and b may not share a name.
func conflicts(a, b string) bool {
	proxy := func(t string) bool { return t == "frontend" || t == "backend" || t == "listen" }
	if proxy(a) && proxy(b) {
		return a == b || a == "listen" || b == "listen"
	}
	return a == b
}

// sectionNames checks names, duplicates and "from" clauses.
func (s *syntaxRun) sectionNames() {
	type decl struct {
		typ  string
		line int
	}
	byName := map[string][]decl{}
	defaults := map[string]bool{}
	for _, sec := range s.cfg.sections {
		switch {
		case unnamedSections[sec.typ] || unmodelledSections[sec.typ]:
		case sec.name == "":
			s.add(sec.line, "error", "%s section without a name", sec.typ)
			continue
		case slices.Contains(proxySections, sec.typ) && !validName(sec.name):
			s.add(sec.line, "error", "%s name %q has a character HAProxy does not permit (letters, digits, '-', '_', '.', ':')", sec.typ, sec.name)
		}
		if sec.from != "" && !defaults[sec.from] {
			s.add(sec.line, "error", "%s %q is based on defaults section %q, which is not declared before it", sec.typ, sec.name, sec.from)
		}
		if sec.typ == "defaults" && sec.name != "" {
			defaults[sec.name] = true
		}
		if sec.name == "" || sec.typ == "defaults" || sec.typ == "global" || sec.typ == "traces" {
			continue
		}
		for _, prev := range byName[sec.name] {
			if !conflicts(prev.typ, sec.typ) {
				continue
			}
			sev := "error"
			if prev.typ == "userlist" {
				sev = "warning" // HAProxy ignores the second one
			}
			s.add(sec.line, sev, "%s %q has the same name as the %s declared at line %d", sec.typ, sec.name, prev.typ, prev.line)
			break
		}
		byName[sec.name] = append(byName[sec.name], decl{sec.typ, sec.line})
	}
}

// servers checks that server names are unique within a backend.
func (s *syntaxRun) servers() {
	names := map[int]map[string]int{}
	for _, d := range s.cfg.dirs {
		sec := s.cfg.sectionOf(d)
		if d.bad || sec == nil || d.words[0] != "server" || len(d.words) < 2 || (sec.typ != "backend" && sec.typ != "listen") {
			continue
		}
		m := names[d.sec]
		if m == nil {
			m = map[string]int{}
			names[d.sec] = m
		}
		if prev, ok := m[d.words[1]]; ok {
			s.add(d.line, "error", "%s %q: server %q is already defined at line %d", sec.typ, sec.name, d.words[1], prev)
			continue
		}
		m[d.words[1]] = d.line
	}
}

// backendRefs checks use_backend and default_backend with a static name.
func (s *syntaxRun) backendRefs() {
	backends := map[string]bool{}
	for _, sec := range s.cfg.sections {
		if sec.typ == "backend" || sec.typ == "listen" {
			backends[sec.name] = true
		}
	}
	for _, d := range s.cfg.dirs {
		sec := s.cfg.sectionOf(d)
		if d.bad || sec == nil || len(d.words) < 2 || sec.typ == "backend" {
			continue
		}
		if d.words[0] != "use_backend" && d.words[0] != "default_backend" {
			continue
		}
		name := unquote(d.words[1])
		if strings.Contains(name, "%[") || backends[name] {
			continue
		}
		s.add(d.line, "error", "%s refers to backend %q, which is not defined", d.words[0], name)
	}
}

// fileArg matches a sample expression function and its first argument.
var fileArg = regexp.MustCompile(`([a-z][a-z0-9_-]*)\(([^,()]*)`)

// fileFuncs take a file as their first argument.
var fileFuncs = map[string]bool{"set-map": true, "del-map": true, "add-acl": true, "del-acl": true}

// fileRefs checks that files referenced below Base are in the bundle.
func (s *syntaxRun) fileRefs(b msg.Bundle) {
	if b.Base == "" {
		return
	}
	r := refChecker{run: s, base: path.Clean(b.Base), have: map[string]bool{}}
	for _, f := range b.Files {
		r.have[f.Path] = true
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			r.have[dir] = true
		}
	}
	crtBase, caBase := "", ""
	for _, d := range s.cfg.dirs {
		if sec := s.cfg.sectionOf(d); sec != nil && sec.typ == "global" && len(d.words) > 1 {
			switch d.words[0] {
			case "crt-base":
				crtBase = unquote(d.words[1])
			case "ca-base":
				caBase = unquote(d.words[1])
			}
		}
	}
	for _, d := range s.cfg.dirs {
		sec := s.cfg.sectionOf(d)
		if d.bad || d.header || sec == nil || unmodelledSections[sec.typ] {
			continue
		}
		ws := d.words
		for i, w := range ws {
			if strings.IndexByte(w, '(') >= 0 {
				for _, m := range fileArg.FindAllStringSubmatch(w, -1) {
					if f := m[1]; f == "map" || strings.HasPrefix(f, "map_") || fileFuncs[f] {
						r.check(d.line, f+"()", m[2], "")
					}
				}
			}
			if i+1 >= len(ws) {
				continue
			}
			tls := ws[0] == "bind" || ws[0] == "server" || ws[0] == "default-server"
			switch {
			case w == "-f":
				r.check(d.line, "pattern file", ws[i+1], "")
			case tls && (w == "crt" || w == "crt-list"):
				r.check(d.line, w, ws[i+1], crtBase)
			case tls && (w == "ca-file" || w == "crl-file"):
				r.check(d.line, w, ws[i+1], caBase)
			case (w == "file" || w == "lf-file") && (ws[0] == "http-error" || slices.Contains(ws, "return")):
				r.check(d.line, w, ws[i+1], "")
			}
		}
		switch {
		case ws[0] == "errorfile" && len(ws) > 2:
			r.check(d.line, "errorfile", ws[2], "")
		case (ws[0] == "lua-load" || ws[0] == "lua-load-per-thread") && len(ws) > 1:
			r.check(d.line, ws[0], ws[1], "")
		}
	}
}

type refChecker struct {
	run  *syntaxRun
	base string
	have map[string]bool // bundle files and their folders
}

// check reports p (relative to relTo when not absolute) when it is below
// the base and not in the bundle. Other relative paths are relative to
// HAProxy's working folder, which is not known here.
func (r refChecker) check(line int, what, p, relTo string) {
	if p = unquote(p); p == "" {
		return
	}
	if !path.IsAbs(p) {
		if relTo == "" {
			return
		}
		p = path.Join(relTo, p)
	}
	p = path.Clean(p)
	prefix := r.base
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	rel, ok := strings.CutPrefix(p, prefix)
	if !ok || rel == "" || r.have[rel] {
		return
	}
	r.run.add(line, "error", "%s %s is below the bundle's base %s, but the bundle has no %s", what, p, r.base, rel)
}

// unquote strips one pair of surrounding quotes.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
