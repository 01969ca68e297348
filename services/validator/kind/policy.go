package kind

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
)

// PolicyKind is the name of the policy kind.
const PolicyKind = "policy"

// ErrInvalidPolicy is wrapped by the errors of Policy.Check.
var ErrInvalidPolicy = config.ErrInvalidPolicy

// Policy is the policy kind's rules, as weft.yaml's validate.policy holds them.
type Policy = config.Policy

// ForbidRule forbids the directives matching its Directive.
type ForbidRule = config.ForbidRule

// compiledRule is a checked ForbidRule.
type compiledRule struct {
	ForbidRule
	re *regexp.Regexp
}

// compile checks the rules and compiles their expressions.
func compile(p Policy) ([]compiledRule, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	rules := make([]compiledRule, 0, len(p.Forbid))
	for _, r := range p.Forbid {
		rules = append(rules, compiledRule{ForbidRule: r, re: regexp.MustCompile(r.Directive)})
	}
	return rules, nil
}

// PolicyChecker checks bundles against Rules. Invalid rules make Check
// return an error (the kind cannot decide), so check them with
// Policy.Check when loading them.
type PolicyChecker struct{ Rules Policy }

// Name implements Checker.
func (PolicyChecker) Name() string { return PolicyKind }

// Check implements Checker.
func (pc PolicyChecker) Check(ctx context.Context, b msg.Bundle) ([]msg.Problem, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	rules, err := compile(pc.Rules)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	var out []msg.Problem
	add := func(file string, line int, f string, args ...any) {
		out = append(out, msg.Problem{File: file, Line: line, Severity: "error", Message: fmt.Sprintf(f, args...)})
	}
	for _, f := range b.Files {
		switch {
		case f.Path == b.Main:
			pc.checkMain(scanConfig(f.Path, f.Content), rules, add)
		case f.Kind == msg.FileMap && pc.Rules.MaxMapEntries > 0:
			n := 0
			for i, line := range strings.Split(string(f.Content), "\n") {
				if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
					continue
				}
				if n++; n == pc.Rules.MaxMapEntries+1 {
					add(f.Path, i+1, "map has more than %d entries (the policy's max_map_entries); this is entry %d", pc.Rules.MaxMapEntries, n)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b msg.Problem) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	return out, nil
}

func (pc PolicyChecker) checkMain(c *haproxyConfig, rules []compiledRule, add func(string, int, string, ...any)) {
	p := pc.Rules
	backends := 0
	servers := map[int]int{}
	seen := map[int][]bool{} // defaults section index -> required directive found
	for _, d := range c.dirs {
		sec := c.sectionOf(d)
		typ := ""
		if sec != nil {
			typ = sec.typ
		}
		text := strings.Join(d.words, " ")
		for _, r := range rules {
			if (r.Section == "" || r.Section == typ) && r.re.MatchString(text) {
				where := "outside any section"
				if sec != nil {
					where = strings.TrimSpace("in " + sec.typ + " " + sec.name)
				}
				add(c.file, d.line, "%q is forbidden %s: %s", clip(text), where, r.Reason)
			}
		}
		switch {
		case sec == nil:
		case d.header && (typ == "backend" || typ == "listen"):
			if backends++; p.MaxBackends > 0 && backends == p.MaxBackends+1 {
				add(c.file, d.line, "more than %d backends (the policy's max_backends): %s %q is backend %d", p.MaxBackends, typ, sec.name, backends)
			}
		case !d.header && (typ == "backend" || typ == "listen") && p.MaxServersPerBackend > 0:
			before := servers[d.sec]
			servers[d.sec] += serverCount(d.words)
			if before <= p.MaxServersPerBackend && servers[d.sec] > p.MaxServersPerBackend {
				add(c.file, d.line, "%s %q has more than %d servers (the policy's max_servers_per_backend)", typ, sec.name, p.MaxServersPerBackend)
			}
		case !d.header && typ == "defaults":
			found := seen[d.sec]
			if found == nil {
				found = make([]bool, len(p.RequireInDefaults))
				seen[d.sec] = found
			}
			for i, req := range p.RequireInDefaults {
				rw := strings.Fields(req)
				found[i] = found[i] || (len(d.words) >= len(rw) && slices.Equal(d.words[:len(rw)], rw))
			}
		}
	}
	if len(p.RequireInDefaults) == 0 {
		return
	}
	anyDefaults := false
	for i, sec := range c.sections {
		if sec.typ != "defaults" {
			continue
		}
		anyDefaults = true
		for j, req := range p.RequireInDefaults {
			if found := seen[i]; found == nil || !found[j] {
				add(c.file, sec.line, "defaults section %s lacks %q, which the policy requires (require_in_defaults)", sectionLabel(sec), strings.Join(strings.Fields(req), " "))
			}
		}
	}
	if !anyDefaults {
		add(c.file, 0, "no defaults section, but the policy requires one holding %s (require_in_defaults)", strings.Join(quoteAll(p.RequireInDefaults), ", "))
	}
}

// serverCount is how many servers a directive declares.
func serverCount(ws []string) int {
	switch {
	case ws[0] == "server":
		return 1
	case ws[0] == "server-template" && len(ws) > 2:
		// server-template <prefix> <num | range> <fqdn>[:<port>] ...
		lo, hi, isRange := strings.Cut(ws[2], "-")
		a, errA := strconv.Atoi(lo)
		if !isRange {
			if errA == nil && a > 0 {
				return a
			}
			return 1
		}
		b, errB := strconv.Atoi(hi)
		if errA == nil && errB == nil && b >= a {
			return b - a + 1
		}
		return 1
	}
	return 0
}

func sectionLabel(s section) string {
	if s.name == "" {
		return "(unnamed)"
	}
	return strconv.Quote(s.name)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(strings.Join(strings.Fields(s), " "))
	}
	return out
}

// TargetPolicies is the policy kind for many targets: each bundle is
// checked against its own target's rules.
type TargetPolicies map[string]Policy

// Name is the kind's name.
func (TargetPolicies) Name() string { return PolicyKind }

// Check checks b against the rules of b's target (none: nothing forbidden).
func (tp TargetPolicies) Check(ctx context.Context, b msg.Bundle) ([]msg.Problem, error) {
	return PolicyChecker{Rules: tp[b.Target]}.Check(ctx, b)
}
