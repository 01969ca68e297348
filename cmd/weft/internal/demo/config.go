package demo

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc/host"
)

// ErrNotDemonstrable wraps the reasons a configuration cannot be run by
// the demo.
var ErrNotDemonstrable = errors.New("demo: configuration not supported")

// Plan is what the demo takes from a configuration.
type Plan struct {
	cfg *config.Config
	// Target is the name of the one target.
	Target string
	// Dest is the target's deploy folder: HAProxy reads haproxy.cfg there.
	Dest string
	// Listen is the first literal address the target's template binds.
	Listen string
	// Manifests are the folders of the configuration's manifests sources.
	Manifests []string

	master, admin string // sockets of the last WriteConfig
}

// bindAddr matches a bind line with a literal IPv4 address and port.
var bindAddr = regexp.MustCompile(`(?m)^\s*bind\s+(\d{1,3}(?:\.\d{1,3}){3}:\d+)(?:\s|$)`)

// Prepare checks that cfg has one target whose template binds a literal
// address and has a global section, and collects what the demo needs.
func Prepare(cfg *config.Config) (*Plan, error) {
	names := cfg.TargetNames()
	if len(names) != 1 {
		return nil, fmt.Errorf("%w: it has %d targets, the demo runs one HAProxy for one", ErrNotDemonstrable, len(names))
	}
	t := cfg.Targets[names[0]]
	m := bindAddr.FindStringSubmatch(t.HAProxyConfig.Template)
	if m == nil {
		return nil, fmt.Errorf("%w: the haproxy_config template of %s binds no literal address such as 127.0.0.1:18080", ErrNotDemonstrable, names[0])
	}
	if _, err := withAdminSocket(t.HAProxyConfig.Template, ""); err != nil {
		return nil, err
	}
	p := &Plan{cfg: cfg, Target: names[0], Dest: t.Deploy.Dest, Listen: m[1]}
	for _, s := range cfg.Sources {
		if s.Type == config.SourceManifests {
			p.Manifests = append(p.Manifests, s.Path)
		}
	}
	return p, nil
}

// RuntimeConfig returns the configuration with the target delivered by the
// runtime driver to the HAProxy whose sockets are master and admin, and the
// admin socket declared in the global section of the target's template.
// Paths in it are absolute, so it can be written anywhere.
func (p *Plan) RuntimeConfig(master, admin string) ([]byte, error) {
	cfg := *p.cfg
	cfg.Targets = map[string]config.Target{}
	t := p.cfg.Targets[p.Target]
	tpl, err := withAdminSocket(t.HAProxyConfig.Template, admin)
	if err != nil {
		return nil, err
	}
	t.HAProxyConfig.Template = tpl
	t.Deploy = config.Deploy{
		Driver: config.DriverRuntime, Instance: t.Deploy.Instance, Dest: t.Deploy.Dest,
		MasterSocket: master, AdminSocket: admin,
	}
	cfg.Targets[p.Target] = t
	data, err := json.MarshalIndent(&cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("demo: runtime configuration: %w", err)
	}
	return data, nil
}

// WriteConfig writes RuntimeConfig to path.
func (p *Plan) WriteConfig(path, master, admin string) error {
	data, err := p.RuntimeConfig(master, admin)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	p.master, p.admin = master, admin
	return nil
}

// Reread loads the configuration at path again (edited while the demo
// runs) and returns its runtime configuration for the same HAProxy, with
// the sockets of the last WriteConfig. A configuration the demo cannot
// run, or whose target moved to another folder or name (HAProxy reads its
// haproxy.cfg from the first), is an error.
func (p *Plan) Reread(path string) ([]byte, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	next, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	if next.Target != p.Target || next.Dest != p.Dest {
		return nil, fmt.Errorf("%w: the target moved from %s in %s to %s in %s; the demo's HAProxy reads the first: restart weft to move it",
			ErrNotDemonstrable, p.Target, p.Dest, next.Target, next.Dest)
	}
	return next.RuntimeConfig(p.master, p.admin)
}

// withAdminSocket adds an admin stats socket line after the template's
// "global" line.
func withAdminSocket(tpl, admin string) (string, error) {
	lines := strings.SplitAfter(tpl, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) == "global" {
			sock := "  stats socket " + admin + " mode 600 level admin expose-fd listeners\n"
			if !strings.HasSuffix(l, "\n") {
				sock = "\n" + sock
			}
			return strings.Join(lines[:i+1], "") + sock + strings.Join(lines[i+1:], ""), nil
		}
	}
	return "", fmt.Errorf("%w: the haproxy_config template has no global section for the admin socket", ErrNotDemonstrable)
}

// WithoutHAProxyKind returns cfg with the haproxy validator kind taken out
// of every target that expects it, for running where haproxy is not
// installed, and the names of those targets. A target left without a kind
// is validated by the template kind; min_kinds is capped at the kinds
// left. cfg itself is not changed.
func WithoutHAProxyKind(cfg *config.Config) (*config.Config, []string) {
	out := *cfg
	out.Targets = make(map[string]config.Target, len(cfg.Targets))
	var changed []string
	for _, name := range cfg.TargetNames() {
		t := cfg.Targets[name]
		if slices.Contains(t.Validate.Kinds, config.KindHAProxy) {
			changed = append(changed, name)
			kinds := slices.DeleteFunc(slices.Clone(t.Validate.Kinds), func(k string) bool { return k == config.KindHAProxy })
			if len(kinds) == 0 {
				kinds = []string{config.KindTemplate}
			}
			t.Validate.Kinds = kinds
			t.Validate.MinKinds = min(t.Validate.MinKinds, len(kinds))
		}
		out.Targets[name] = t
	}
	return &out, changed
}

// Addrs lists the addresses the demo listens on for this plan, each with
// how a person changes it: HAProxy's bind address (in the configuration at
// configPath) and an echo backend's for every endpoint of the
// EndpointSlices.
func (p *Plan) Addrs(configPath string) ([]host.Addr, error) {
	out := []host.Addr{{
		Addr:   p.Listen,
		What:   "HAProxy of the demo, the bind line of target " + p.Target + "'s haproxy_config template",
		Change: "that bind line in " + configPath + " (--config or WEFT_CONFIG)",
	}}
	for _, dir := range p.Manifests {
		eps, err := Endpoints([]string{dir})
		if err != nil {
			return nil, err
		}
		for _, e := range eps {
			out = append(out, host.Addr{
				Addr:   e.Addr,
				What:   "the demo's echo backend " + e.Name,
				Change: "the port of its EndpointSlice under " + dir,
			})
		}
	}
	return out, nil
}
