package config

import (
	"reflect"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// Puller configures the puller's controller (`weft-puller controller`):
// the Kubernetes source whose objects it reads and the image of its pull
// Jobs. Setting it adds the watched resource types the controller reads
// (PullerTypes) to watched_resources.
type Puller struct {
	// Source names the kubernetes source that watches the puller's types.
	Source string `json:"source"`
	// HelperImage is weft's image, holding weft-noop, run by pull Jobs
	// (mode job) to install it.
	HelperImage string `json:"helper_image"`
	// HelperBinary is weft-noop's path in HelperImage (default
	// /usr/local/bin/weft-noop).
	HelperBinary string `json:"helper_binary,omitempty"`
	// AgentNamespace is where the node agents (weft-puller agent) run
	// (default weft-system); documentation for deployments, the
	// controller does not read it.
	AgentNamespace string `json:"agent_namespace,omitempty"`
	// Resync is how often the controller looks at everything again
	// without a change (default 1m).
	Resync Duration `json:"resync,omitempty"`
	// SlotTTL is how long the slot of a pull Job outlives the last
	// renewal of its holders (default 10s, at most msg.LeaseTTL): how
	// soon the slots of Jobs that no replica looks after come back.
	SlotTTL Duration `json:"slot_ttl,omitempty"`
}

// Defaults of the puller section.
const (
	DefaultPullerHelperBinary   = "/usr/local/bin/weft-noop"
	DefaultPullerAgentNamespace = "weft-system"
	DefaultPullerResync         = time.Minute
)

// The watched resource types the puller section adds, by name.
const (
	PullerDeployments  = "puller_deployments"
	PullerStatefulSets = "puller_statefulsets"
	PullerDaemonSets   = "puller_daemonsets"
	PullerNodes        = "puller_nodes"
	PullerNamespaces   = "puller_namespaces"
	PullerPolicies     = "puller_policies"
	PullerImages       = "puller_images"
	PullerJobs         = "puller_jobs"
)

// PullerJobSelector selects weft's pull Jobs (their labels).
const PullerJobSelector = "app.kubernetes.io/managed-by=weft,app.kubernetes.io/component=puller"

// PullerTypes are the watched resource types the puller section adds:
// the workloads, Nodes, Namespaces, the puller's own resources and its
// pull Jobs.
func PullerTypes() map[string]Resource {
	return map[string]Resource{
		PullerDeployments:  {APIVersion: "apps/v1", Kind: "Deployment", Store: StoreFull},
		PullerStatefulSets: {APIVersion: "apps/v1", Kind: "StatefulSet", Store: StoreFull},
		PullerDaemonSets:   {APIVersion: "apps/v1", Kind: "DaemonSet", Store: StoreFull},
		PullerNodes:        {APIVersion: "v1", Kind: "Node", Store: StoreFull},
		PullerNamespaces:   {APIVersion: "v1", Kind: "Namespace", Store: StoreFull},
		PullerPolicies:     {APIVersion: "weft.io/v1alpha1", Kind: "PrePullPolicy", Store: StoreFull},
		PullerImages:       {APIVersion: "weft.io/v1alpha1", Kind: "PrePullImage", Store: StoreFull},
		PullerJobs:         {APIVersion: "batch/v1", Kind: "Job", LabelSelector: PullerJobSelector, Store: StoreFull},
	}
}

// pullerDefaults fills the puller section's defaults and adds its watched
// types (a type of the same name the file defines stays, for check to
// report).
func (c *Config) pullerDefaults() {
	if c.Puller == nil {
		return
	}
	p := *c.Puller
	if p.HelperBinary == "" {
		p.HelperBinary = DefaultPullerHelperBinary
	}
	if p.AgentNamespace == "" {
		p.AgentNamespace = DefaultPullerAgentNamespace
	}
	if p.Resync == 0 {
		p.Resync = Duration(DefaultPullerResync)
	}
	c.Puller = &p
	if c.WatchedResources == nil {
		c.WatchedResources = map[string]Resource{}
	}
	for name, r := range PullerTypes() {
		if _, ok := c.WatchedResources[name]; !ok {
			c.WatchedResources[name] = r
		}
	}
}

// checkPuller reports the puller section's problems.
func (c *Config) checkPuller(ps *problems) {
	p := c.Puller
	if p == nil {
		return
	}
	f := path{"puller"}
	switch i := c.sourceIndex(p.Source); {
	case p.Source == "":
		ps.add(f.k("source"), "required: the kubernetes source that watches the puller's types")
	case i < 0:
		ps.add(f.k("source"), "%q is not a source", p.Source)
	case c.Sources[i].Type != SourceKubernetes:
		ps.add(f.k("source"), "%q is a %s source, not a kubernetes source", p.Source, c.Sources[i].Type)
	}
	if p.HelperImage == "" {
		ps.add(f.k("helper_image"), "required: weft's image, which pull Jobs run to install weft-noop")
	}
	if p.Resync < 0 {
		ps.add(f.k("resync"), "must not be negative")
	}
	if p.SlotTTL < 0 || p.SlotTTL.D() > msg.LeaseTTL {
		ps.add(f.k("slot_ttl"), "must be in (0, %v], got %v", msg.LeaseTTL, p.SlotTTL.D())
	}
	for _, name := range sortedKeys(PullerTypes()) {
		if !reflect.DeepEqual(c.WatchedResources[name], PullerTypes()[name]) {
			ps.add(path{"watched_resources", name}, "the type name %q is reserved for the puller section", name)
		}
	}
}

func (c *Config) sourceIndex(name string) int {
	for i, s := range c.Sources {
		if s.Name == name {
			return i
		}
	}
	return -1
}
