package config

import (
	"slices"
	"time"
)

// Defaults of deploy.canary.
const (
	DefaultCanaryHold                = time.Minute
	DefaultCanaryMax5xxRatioIncrease = 0.05
)

// Canary makes an accepted bundle go to some instances first: the
// deployer watches them for Hold and deploys the rest only if HAProxy's
// own view stayed healthy; otherwise it rolls the canaries back and
// refuses the bundle.
type Canary struct {
	// Instances is how many instances, the first in name order, get the
	// bundle first (default 1, when Names is empty).
	Instances int `json:"instances,omitempty"`
	// Names are the canary instances by name, in place of Instances.
	Names []string `json:"names,omitempty"`
	// Hold is how long the canaries are watched (default 60s).
	Hold Duration `json:"hold,omitempty"`
	// Max5xxRatioIncrease is by how much the share of 5xx responses of a
	// frontend or backend may grow during the hold, compared with before
	// the deploy (default 0.05: five percentage points).
	Max5xxRatioIncrease *float64 `json:"max_5xx_ratio_increase,omitempty"`
	// MaxServersDown is how many servers that were UP before the deploy
	// may be DOWN at the end of the hold, per instance (default 0).
	MaxServersDown int `json:"max_servers_down,omitempty"`
}

// MaxRatioIncrease is Max5xxRatioIncrease or its default.
func (c Canary) MaxRatioIncrease() float64 {
	if c.Max5xxRatioIncrease == nil {
		return DefaultCanaryMax5xxRatioIncrease
	}
	return *c.Max5xxRatioIncrease
}

// CanaryInstances returns the names of the canary instances among the
// target's instances: Names, or the first Instances in name order.
func (d Deploy) CanaryInstances() []string {
	if d.Canary == nil {
		return nil
	}
	if len(d.Canary.Names) > 0 {
		return slices.Clone(d.Canary.Names)
	}
	var names []string
	for _, in := range d.PerInstance() {
		names = append(names, in.Instance)
	}
	slices.Sort(names)
	return names[:min(max(d.Canary.Instances, 1), len(names))]
}

func (c *Canary) defaults() {
	if c.Hold == 0 {
		c.Hold = Duration(DefaultCanaryHold)
	}
	if c.Instances == 0 && len(c.Names) == 0 {
		c.Instances = 1
	}
}

// checkCanary reports the problems of deploy.canary: the canaries must be
// some, not all, of the target's fixed instances.
func checkCanary(f path, d Deploy, bad func(p path, format string, args ...any)) {
	c := d.Canary
	switch {
	case d.Pods != nil:
		bad(f, "not supported with deploy.pods (instances come and go)")
		return
	case d.Site != "":
		bad(f, "not supported for a target delivered at a site")
		return
	case len(d.Instances) < 2:
		bad(f, "needs at least two deploy.instances: the canaries and the rest")
		return
	}
	known := map[string]bool{}
	for _, in := range d.Instances {
		known[in.Name] = true
	}
	if len(c.Names) > 0 && c.Instances != 0 {
		bad(f.k("instances"), "give instances or names, not both")
	}
	if len(c.Names) == 0 && (c.Instances < 1 || c.Instances >= len(d.Instances)) {
		bad(f.k("instances"), "must be between 1 and %d (fewer than the target's instances), got %d", len(d.Instances)-1, c.Instances)
	}
	seen := map[string]bool{}
	for i, n := range c.Names {
		switch {
		case !known[n]:
			bad(f.k("names").i(i), "%q is not one of deploy.instances", n)
		case seen[n]:
			bad(f.k("names").i(i), "%q is given twice", n)
		default:
			seen[n] = true
		}
	}
	if len(seen) >= len(d.Instances) {
		bad(f.k("names"), "names every instance: nothing would be left to deploy after the hold")
	}
	if c.Hold < 0 {
		bad(f.k("hold"), "must not be negative")
	}
	if r := c.Max5xxRatioIncrease; r != nil && (*r < 0 || *r > 1) {
		bad(f.k("max_5xx_ratio_increase"), "must be between 0 and 1, got %g", *r)
	}
	if c.MaxServersDown < 0 {
		bad(f.k("max_servers_down"), "must not be negative, got %d", c.MaxServersDown)
	}
}
