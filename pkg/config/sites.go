package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weftio/weft/pkg/msg"
)

// checkSites reports the problems of sites, hub_domain and each target's
// deploy.site.
func (c *Config) checkSites(ps *problems) {
	bad := ps.add
	if err := msg.ValidToken(c.HubDomain); err != nil {
		bad(path{"hub_domain"}, "%v", err)
	}
	seen := map[string]bool{}
	for i, s := range c.Sites {
		f := path{"sites"}.i(i)
		switch {
		case msg.ValidToken(s) != nil:
			bad(f, "%v (a site is the JetStream domain of its leaf node)", msg.ValidToken(s))
		case seen[s]:
			bad(f, "%q is listed twice", s)
		case s == c.HubDomain:
			bad(f, "%q is the hub's JetStream domain (hub_domain); a site needs a domain of its own", s)
		}
		seen[s] = true
	}
	for _, name := range sortedKeys(c.Targets) {
		d := c.Targets[name].Deploy
		if d.Site == "" {
			continue
		}
		f := path{"targets", name, "deploy", "site"}
		switch {
		case len(c.Sites) == 0:
			bad(f, "unknown site %q: weft.yaml lists no sites (add it to sites)", d.Site)
		case !slices.Contains(c.Sites, d.Site):
			bad(f, "unknown site %q (sites: %s)", d.Site, strings.Join(c.Sites, ", "))
		}
		if d.Pods != nil {
			bad(path{"targets", name, "deploy", "pods"}, "a target of a site has no Pods to follow: the watcher's objects stay at the hub")
		}
	}
}

// CheckSite checks that site ("" is the hub) is one of the configuration's.
func (c *Config) CheckSite(site string) error {
	if site == "" || slices.Contains(c.Sites, site) {
		return nil
	}
	if len(c.Sites) == 0 {
		return fmt.Errorf("%w: site %q: weft.yaml lists no sites", ErrInvalid, site)
	}
	return fmt.Errorf("%w: site %q is not one of weft.yaml's sites (%s)", ErrInvalid, site, strings.Join(c.Sites, ", "))
}

// SiteTargets returns, in order, the targets delivered at site ("" is the
// hub).
func (c *Config) SiteTargets(site string) []string {
	var out []string
	for _, name := range c.TargetNames() {
		if c.Targets[name].Deploy.Site == site {
			out = append(out, name)
		}
	}
	return out
}

// ProvisionOptions are the options of msg.Provision for a process at site
// ("" is the hub): the hub sources the statuses of every site (and of no
// site weft.yaml no longer lists), a site its targets' verdicts,
// validation statuses and the bundles from the hub.
func (c *Config) ProvisionOptions(site string) []msg.ProvisionOption {
	if site == "" {
		return []msg.ProvisionOption{msg.WithSites(c.Sites...)}
	}
	return []msg.ProvisionOption{msg.AtSite(site, c.HubDomain, c.SiteTargets(site))}
}
