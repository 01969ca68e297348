package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	parser "github.com/haproxytech/client-native/v6/config-parser"
	parsererrors "github.com/haproxytech/client-native/v6/config-parser/errors"
	"github.com/haproxytech/client-native/v6/config-parser/params"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/weftio/weft/pkg/haproxycfg"
)

// serverState is what the runtime endpoints can change on a server line.
type serverState struct {
	addr   netip.AddrPort // invalid when the address is not a literal ip:port
	raw    string
	weight int // -1 when the line does not set one
	maint  bool
	// stateSet: the line says "disabled" or "enabled".
	stateSet bool
}

// serverChange is a server whose runtime state differs between two
// configurations that are otherwise the same.
type serverChange struct {
	backend, name string
	old, new      serverState
}

// structureError tells why two configurations differ in structure.
type structureError struct{ detail string }

func (e *structureError) Error() string { return e.detail }

func structuref(format string, args ...any) error {
	return &structureError{detail: fmt.Sprintf(format, args...)}
}

// proxyKinds are the sections that hold server lines.
var proxyKinds = []parser.Section{parser.Backends, parser.Listen}

// parseConfig reads a configuration with client-native's parser. Whole-line
// comments are dropped first (the API's "# _version=N" line among them): they
// are no difference.
func parseConfig(b []byte) (parser.Parser, error) {
	var kept []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		kept = append(kept, line)
	}
	p, err := haproxycfg.Parse(strings.Join(kept, "\n") + "\n")
	if err != nil {
		return nil, fmt.Errorf("parse configuration: %w", err)
	}
	return p, nil
}

// diffConfig compares the running configuration with the new one. It returns
// the server changes when they are the only differences, or a
// *structureError.
func diffConfig(oldB, newB []byte) ([]serverChange, error) {
	oldP, err := parseConfig(oldB)
	if err != nil {
		return nil, structuref("current configuration: %v", err)
	}
	newP, err := parseConfig(newB)
	if err != nil {
		return nil, structuref("new configuration: %v", err)
	}
	defaultsTouch := setsServerDefaults(oldP) || setsServerDefaults(newP)
	var changes []serverChange
	for _, sec := range proxyKinds {
		names, _ := newP.SectionsGet(sec) // a missing kind is an empty list
		for _, name := range names {
			ch, err := diffServers(oldP, newP, sec, name, defaultsTouch)
			if err != nil {
				return nil, err
			}
			changes = append(changes, ch...)
		}
	}
	// With the runtime settings of the changed servers put back to the old
	// values, the configurations must be the same.
	if oldS, newS := oldP.String(), newP.String(); oldS != newS {
		return nil, structuref("%s", firstDifference(oldS, newS))
	}
	return changes, nil
}

// diffServers finds the runtime changes of one section's servers and undoes
// them in newP.
func diffServers(oldP, newP parser.Parser, sec parser.Section, name string, defaultsTouch bool) ([]serverChange, error) {
	newSrv, ok := servers(newP, sec, name)
	if !ok {
		return nil, nil
	}
	oldSrv, ok := servers(oldP, sec, name)
	if !ok {
		return nil, nil // the sections differ: the text comparison says so
	}
	var changes []serverChange
	for i := range newSrv {
		j := slices.IndexFunc(oldSrv, func(s types.Server) bool { return s.Name == newSrv[i].Name })
		if j < 0 {
			continue
		}
		o, n := readServer(oldSrv[j]), readServer(newSrv[i])
		if o.same(n) {
			continue
		}
		if err := runtimeChangeable(o, n, defaultsTouch); err != nil {
			return nil, structuref("%s %s: server %s: %v", sec, name, newSrv[i].Name, err)
		}
		changes = append(changes, serverChange{backend: name, name: newSrv[i].Name, old: o, new: n})
		newSrv[i] = withRuntimeOf(newSrv[i], oldSrv[j])
	}
	if err := newP.Set(sec, name, "server", newSrv); err != nil {
		return nil, fmt.Errorf("dataplane: rewrite servers of %s %s: %w", sec, name, err)
	}
	return changes, nil
}

func servers(p parser.Parser, sec parser.Section, name string) ([]types.Server, bool) {
	data, err := p.Get(sec, name, "server")
	if err != nil {
		return nil, false
	}
	s, ok := data.([]types.Server)
	return s, ok
}

func readServer(s types.Server) serverState {
	st := serverState{raw: s.Address, weight: -1}
	st.addr = parseAddress(s.Address)
	for _, p := range s.Params {
		switch o := p.(type) {
		case *params.ServerOptionValue:
			if o.Name == "weight" {
				if w, err := strconv.Atoi(o.Value); err == nil {
					st.weight = w
				} else {
					st.weight = -2 // not a number: never equal to a number
				}
			}
		case *params.ServerOptionWord:
			switch o.Name {
			case "disabled":
				st.maint, st.stateSet = true, true
			case "enabled":
				st.maint, st.stateSet = false, true
			}
		}
	}
	return st
}

func (s serverState) same(o serverState) bool {
	return s.raw == o.raw && s.weight == o.weight && s.maint == o.maint && s.stateSet == o.stateSet
}

// effectiveWeight is the weight a server runs with when no default-server
// line sets one.
func (s serverState) effectiveWeight() int {
	if s.weight < 0 {
		return 1
	}
	return s.weight
}

// runtimeChangeable tells why a server change cannot go through the runtime
// endpoints, or nil.
func runtimeChangeable(o, n serverState, defaultsTouch bool) error {
	if o.raw != n.raw && (!o.addr.IsValid() || !n.addr.IsValid()) {
		return fmt.Errorf("address %q to %q is not a change between literal ip:port addresses", o.raw, n.raw)
	}
	if o.weight == -2 || n.weight == -2 || n.weight > 256 {
		return errors.New("weight is not a number from 0 to 256")
	}
	if defaultsTouch && ((o.weight != n.weight && (o.weight < 0 || n.weight < 0)) || o.stateSet != n.stateSet) {
		return errors.New("weight or state given on one side only while a default-server line sets them")
	}
	return nil
}

// withRuntimeOf is s with the address, weight and state of old, when the
// rest of the line is the same as old's (else s is left as it is, and the
// text comparison reports the difference).
func withRuntimeOf(s, old types.Server) types.Server {
	if !slices.Equal(otherParams(s), otherParams(old)) {
		return s
	}
	out := s
	out.Address, out.Params = old.Address, old.Params
	return out
}

// otherParams are the words of a server line's settings that the runtime
// endpoints cannot change.
func otherParams(s types.Server) []string {
	var out []string
	for _, p := range s.Params {
		if !isRuntimeParam(p) {
			out = append(out, p.String())
		}
	}
	return out
}

func isRuntimeParam(p params.ServerOption) bool {
	switch o := p.(type) {
	case *params.ServerOptionValue:
		return o.Name == "weight"
	case *params.ServerOptionWord:
		return o.Name == "disabled" || o.Name == "enabled"
	}
	return false
}

// setsServerDefaults reports whether a default-server line sets a weight or
// a state.
func setsServerDefaults(p parser.Parser) bool {
	for _, sec := range []parser.Section{parser.Defaults, parser.Backends, parser.Listen} {
		names, _ := p.SectionsGet(sec)
		for _, name := range names {
			data, err := p.Get(sec, name, "default-server")
			if err != nil {
				if !errors.Is(err, parsererrors.ErrFetch) {
					return true // unreadable: assume the worst
				}
				continue
			}
			ds, _ := data.([]types.DefaultServer)
			for _, d := range ds {
				if slices.ContainsFunc(d.Params, isRuntimeParam) {
					return true
				}
			}
		}
	}
	return false
}

// parseAddress reads a literal "ip:port" ("[ip]:port" for IPv6), optionally
// prefixed with "ipv4@" or "ipv6@".
func parseAddress(a string) netip.AddrPort {
	a = strings.TrimPrefix(strings.TrimPrefix(a, "ipv4@"), "ipv6@")
	ap, err := netip.ParseAddrPort(a)
	if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// firstDifference names the first line where two normalized configurations
// differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = strings.TrimSpace(al[i])
		}
		if i < len(bl) {
			y = strings.TrimSpace(bl[i])
		}
		if x != y {
			return fmt.Sprintf("%q became %q", x, y)
		}
	}
	return "the configurations differ"
}
