package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrInvalidPolicy is wrapped by the errors of Policy.Check.
var ErrInvalidPolicy = errors.New("invalid policy")

// PolicySections are the HAProxy section types a forbid rule may name.
var PolicySections = map[string]bool{
	"global": true, "defaults": true, "frontend": true, "backend": true, "listen": true,
	"resolvers": true, "userlist": true, "peers": true, "mailers": true, "cache": true,
	"http-errors": true, "ring": true, "log-forward": true, "fcgi-app": true, "crt-store": true,
	"traces": true, "log-profile": true, "acme": true, "healthcheck": true, "program": true,
}

// Policy is what an operator allows in a target's rendered configuration,
// beyond what HAProxy accepts; the policy validator kind enforces it. Zero
// values allow everything.
type Policy struct {
	// Forbid lists directives that must not appear.
	Forbid []ForbidRule `json:"forbid,omitempty"`
	// MaxBackends bounds the backend and listen sections.
	MaxBackends int `json:"max_backends,omitempty"`
	// MaxServersPerBackend bounds the servers of one backend or listen
	// section; a server-template counts as the servers it declares.
	MaxServersPerBackend int `json:"max_servers_per_backend,omitempty"`
	// MaxMapEntries bounds the entries of each map file.
	MaxMapEntries int `json:"max_map_entries,omitempty"`
	// RequireInDefaults lists directives every defaults section must hold,
	// matched by their leading words ("timeout connect" matches
	// "timeout connect 5s").
	RequireInDefaults []string `json:"require_in_defaults,omitempty"`
}

// ForbidRule forbids the directives matching Directive.
type ForbidRule struct {
	// Directive is a regular expression matched against each directive
	// line of the main configuration: its words joined by single spaces,
	// without its comment and surrounding space ("option httpclose",
	// "server s1 10.0.0.1:80 check"). Section header lines are directives
	// of the section they open. Anchor it to match whole lines.
	Directive string `json:"directive"`
	// Section, when set, limits the rule to one section type.
	Section string `json:"section,omitempty"`
	// Reason tells the author why; problems quote it.
	Reason string `json:"reason"`
}

// Check reports what is wrong with the rules themselves, naming each
// faulty rule; the errors wrap ErrInvalidPolicy.
func (p Policy) Check() error {
	var errs []error
	for _, pe := range p.problems() {
		errs = append(errs, pe)
	}
	return errors.Join(errs...)
}

// problems lists what is wrong with the rules.
func (p Policy) problems() []policyProblem {
	var out []policyProblem
	add := func(field path, msg, text string) {
		out = append(out, policyProblem{field: field, msg: msg, text: text})
	}
	for i, r := range p.Forbid {
		fp := path{"forbid"}.i(i)
		name := fmt.Sprintf("forbid[%d] (%q)", i, r.Directive)
		switch _, err := regexp.Compile(r.Directive); {
		case strings.TrimSpace(r.Directive) == "":
			add(fp.k("directive"), "required", fmt.Sprintf("forbid[%d]: directive is empty", i))
		case err != nil:
			add(fp.k("directive"), err.Error(), name+": "+err.Error())
		}
		if r.Section != "" && !PolicySections[r.Section] {
			m := fmt.Sprintf("unknown section type %q", r.Section)
			add(fp.k("section"), m, name+": "+m)
		}
		if strings.TrimSpace(r.Reason) == "" {
			add(fp.k("reason"), "required", name+": reason is empty")
		}
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"max_backends", p.MaxBackends}, {"max_servers_per_backend", p.MaxServersPerBackend}, {"max_map_entries", p.MaxMapEntries}} {
		if n.v < 0 {
			add(path{n.field}, fmt.Sprintf("must not be negative, got %d", n.v), fmt.Sprintf("%s is negative (%d)", n.field, n.v))
		}
	}
	for i, d := range p.RequireInDefaults {
		if strings.TrimSpace(d) == "" {
			add(path{"require_in_defaults"}.i(i), "empty", fmt.Sprintf("require_in_defaults[%d] is empty", i))
		}
	}
	return out
}

// policyProblem is one problem of a Policy: field is where it is below the
// policy and msg what is wrong there (for the configuration's problems),
// text what Check says.
type policyProblem struct {
	field     path
	msg, text string
}

func (e policyProblem) Error() string { return ErrInvalidPolicy.Error() + ": " + e.text }
func (e policyProblem) Unwrap() error { return ErrInvalidPolicy }
