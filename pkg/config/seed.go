package config

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The seed form: a weft.yaml written as haproxy-template-ic's controller
// configuration (pod_selector, controller, logging, validation, and the
// template sections at the top level) instead of sources and targets. Load
// turns it into weft's form (expandSeed): the Kubernetes API as the one
// source, one target named SeedTarget holding the template sections and
// deployed by the dataplane driver to every ready Pod that pod_selector
// picks, watched as the type SeedPodsType.

// Names the seed form gives what it implies.
const (
	// SeedTarget is the one target of the seed form.
	SeedTarget = "haproxy"
	// SeedSource is the seed form's one source, the Kubernetes API.
	SeedSource = "kubernetes"
	// SeedPodsType is the watched type of the Pods pod_selector picks.
	SeedPodsType = "haproxy-pods"
	// SeedBase is the folder the seed's templates name (/etc/haproxy/maps/...).
	SeedBase = "/etc/haproxy"
	// SeedDataplanePort is the Dataplane API's port in the selected Pods.
	SeedDataplanePort = 5555
)

// Environment variables holding the Dataplane API credentials of the seed
// form, named as the keys of the seed's credentials Secret (what
// `envFrom: [{secretRef: ...}]` makes of them).
const (
	SeedUserEnv     = "dataplane_username"
	SeedPasswordEnv = "dataplane_password"
)

// PodSelector picks the HAProxy Pods of the seed form by their labels.
type PodSelector struct {
	MatchLabels map[string]string `json:"match_labels"`
}

// Selector is the label selector of MatchLabels, keys sorted.
func (p PodSelector) Selector() string {
	keys := sortedKeys(p.MatchLabels)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p.MatchLabels[k]
	}
	return strings.Join(parts, ",")
}

// Controller holds the ports a process listens on: HealthzPort serves
// /healthz and /readyz, MetricsPort /metrics (0: the --listen address).
// They apply where neither --listen nor WEFT_LISTEN is given.
type Controller struct {
	HealthzPort int `json:"healthz_port,omitempty"`
	MetricsPort int `json:"metrics_port,omitempty"`
}

// Logging sets the log level where neither --log-level nor WEFT_LOG_LEVEL
// is given: Verbose 0 is warn, 1 info, 2 debug.
type Logging struct {
	Verbose *int `json:"verbose,omitempty"`
}

// Level is the slog level of Verbose (info when unset).
func (l *Logging) Level() slog.Level {
	if l == nil || l.Verbose == nil {
		return slog.LevelInfo
	}
	switch *l.Verbose {
	case 0:
		return slog.LevelWarn
	case 1:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}

// SeedValidation is the seed's validation section: the Dataplane API its
// controller validated with. weft validates with `haproxy -c` itself (the
// seed's own two-phase validation needs no sidecar); the address is
// checked and kept, and a process names it as not used.
type SeedValidation struct {
	DataplaneHost string `json:"dataplane_host,omitempty"`
	DataplanePort int    `json:"dataplane_port,omitempty"`
}

// seedForm reports whether the file is written in the seed form: template
// sections at the top level.
func (c *Config) seedForm() bool {
	return c.HAProxyConfig != nil || c.TemplateSnippets != nil || c.Maps != nil || c.Files != nil
}

// expandSeed turns the seed form into sources and one target; it also
// checks the seed-only sections, which a file in weft's form may carry
// too.
func (c *Config) expandSeed(ps *problems) {
	c.checkSeedSections(ps)
	if !c.seedForm() {
		if c.PodSelector != nil {
			ps.add(path{"pod_selector"}, "needs the template sections at the top level (haproxy_config, ...); with targets, deploy.pods selects Pods")
		}
		return
	}
	if c.Targets != nil {
		ps.add(path{"targets"}, "the template sections at the top level (haproxy_config, template_snippets, maps, files) make the one target %q: write them under targets or at the top level, not both", SeedTarget)
		return
	}
	if c.HAProxyConfig == nil {
		ps.add(path{"haproxy_config", "template"}, "required")
		return
	}
	if c.PodSelector == nil || len(c.PodSelector.MatchLabels) == 0 {
		ps.add(path{"pod_selector", "match_labels"}, "required with the top-level template sections: the labels of the HAProxy Pods (with their Dataplane API on port %d) to deploy to", SeedDataplanePort)
		return
	}
	if c.Sources == nil {
		c.Sources = []Source{{Name: SeedSource, Type: SourceKubernetes}}
	}
	if _, taken := c.WatchedResources[SeedPodsType]; taken {
		ps.add(path{"watched_resources", SeedPodsType}, "the type name %q is reserved for the Pods pod_selector picks", SeedPodsType)
		return
	}
	if c.WatchedResources == nil {
		c.WatchedResources = map[string]Resource{}
	}
	sel := c.PodSelector.Selector()
	c.WatchedResources[SeedPodsType] = Resource{APIVersion: "v1", Kind: "Pod", LabelSelector: sel, Store: StoreFull}
	c.Targets = map[string]Target{SeedTarget: {
		TemplateSnippets: c.TemplateSnippets,
		Maps:             c.Maps,
		Files:            c.Files,
		HAProxyConfig:    *c.HAProxyConfig,
		Base:             SeedBase,
		Deploy: Deploy{
			Driver:    DriverDataplane,
			Dataplane: Dataplane{User: os.Getenv(SeedUserEnv), Password: os.Getenv(SeedPasswordEnv)},
			Pods:      &Pods{Type: SeedPodsType, LabelSelector: sel, Port: SeedDataplanePort},
		},
		seed: true,
	}}
}

// checkSeedSections reports the problems of pod_selector, controller,
// logging and validation.
func (c *Config) checkSeedSections(ps *problems) {
	if p := c.PodSelector; p != nil {
		for _, k := range sortedKeys(p.MatchLabels) {
			for _, e := range validation.IsQualifiedName(k) {
				ps.add(path{"pod_selector", "match_labels", k}, "label name: %s", e)
			}
			for _, e := range validation.IsValidLabelValue(p.MatchLabels[k]) {
				ps.add(path{"pod_selector", "match_labels", k}, "label value %q: %s", p.MatchLabels[k], e)
			}
		}
	}
	port := func(p path, n int) {
		if n < 0 || n > 65535 {
			ps.add(p, "%d is not a port", n)
		}
	}
	if ctl := c.Controller; ctl != nil {
		port(path{"controller", "healthz_port"}, ctl.HealthzPort)
		port(path{"controller", "metrics_port"}, ctl.MetricsPort)
	}
	if l := c.Logging; l != nil && l.Verbose != nil && (*l.Verbose < 0 || *l.Verbose > 2) {
		ps.add(path{"logging", "verbose"}, "must be 0 (warning), 1 (info) or 2 (debug), got %d", *l.Verbose)
	}
	if v := c.Validation; v != nil {
		port(path{"validation", "dataplane_port"}, v.DataplanePort)
	}
}

// ListenAddrs returns where /healthz with /readyz and /metrics are served
// when controller sets their ports: listen's host with each port (listen
// itself for a port left 0).
func (c *Config) ListenAddrs(listen string) (healthz, metrics string, err error) {
	ctl := c.Controller
	if ctl == nil {
		return listen, listen, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", "", fmt.Errorf("listen %q: %w", listen, err)
	}
	at := func(p int) string {
		if p == 0 {
			return listen
		}
		return net.JoinHostPort(host, strconv.Itoa(p))
	}
	return at(ctl.HealthzPort), at(ctl.MetricsPort), nil
}

// SeedNotes are what a process should say about the seed sections it
// accepts but does not act on, one line each.
func (c *Config) SeedNotes() []string {
	var out []string
	if v := c.Validation; v != nil && (v.DataplaneHost != "" || v.DataplanePort != 0) {
		out = append(out, fmt.Sprintf("validation.dataplane_host/dataplane_port (%s) are not used: weft validates every bundle with haproxy -c itself",
			net.JoinHostPort(cmp.Or(v.DataplaneHost, "localhost"), strconv.Itoa(v.DataplanePort))))
	}
	if t, ok := c.Targets[SeedTarget]; ok && t.seed && t.Deploy.Dataplane.User == "" {
		out = append(out, fmt.Sprintf("%s is not set: deploys to the Dataplane APIs of the selected Pods will be refused until it names their user (and %s its password)", SeedUserEnv, SeedPasswordEnv))
	}
	return slices.Clip(out)
}
