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
	bad := func(f string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+f, append([]any{ErrInvalidPolicy}, args...)...))
	}
	for i, r := range p.Forbid {
		name := fmt.Sprintf("forbid[%d] (%q)", i, r.Directive)
		switch _, err := regexp.Compile(r.Directive); {
		case strings.TrimSpace(r.Directive) == "":
			bad("forbid[%d]: directive is empty", i)
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalidPolicy, name, err))
		}
		if r.Section != "" && !PolicySections[r.Section] {
			bad("%s: unknown section type %q", name, r.Section)
		}
		if strings.TrimSpace(r.Reason) == "" {
			bad("%s: reason is empty", name)
		}
	}
	if p.MaxBackends < 0 {
		bad("max_backends is negative (%d)", p.MaxBackends)
	}
	if p.MaxServersPerBackend < 0 {
		bad("max_servers_per_backend is negative (%d)", p.MaxServersPerBackend)
	}
	if p.MaxMapEntries < 0 {
		bad("max_map_entries is negative (%d)", p.MaxMapEntries)
	}
	for i, d := range p.RequireInDefaults {
		if strings.TrimSpace(d) == "" {
			bad("require_in_defaults[%d] is empty", i)
		}
	}
	return errors.Join(errs...)
}
