package controller

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
)

// Types names the watched resource types the controller reads from the
// resources bucket (the watched_resources of weft.yaml that the source
// provides).
type Types struct {
	Deployments  string
	StatefulSets string
	DaemonSets   string
	Nodes        string
	Namespaces   string
	Policies     string
	Images       string
	Jobs         string
}

// DefaultTypes are the type names weft.yaml's puller section adds
// (config.PullerTypes).
var DefaultTypes = Types{
	Deployments: config.PullerDeployments, StatefulSets: config.PullerStatefulSets, DaemonSets: config.PullerDaemonSets,
	Nodes: config.PullerNodes, Namespaces: config.PullerNamespaces, Policies: config.PullerPolicies,
	Images: config.PullerImages, Jobs: config.PullerJobs,
}

// FromConfig is the controller's configuration from weft.yaml's puller
// section (cfg.Puller must be set); kube and dyn reach the API server.
func FromConfig(cfg *config.Config, kube kubernetes.Interface, dyn dynamic.Interface) (Config, error) {
	p := cfg.Puller
	if p == nil {
		return Config{}, errors.New("weft.yaml has no puller section")
	}
	return Config{
		Source: p.Source, Types: DefaultTypes, HelperImage: p.HelperImage, HelperBinary: p.HelperBinary,
		Kube: kube, Dynamic: dyn, Resync: p.Resync.D(), SlotTTL: p.SlotTTL.D(),
	}, nil
}

func (t Types) all() []string {
	return []string{t.Deployments, t.StatefulSets, t.DaemonSets, t.Nodes, t.Namespaces, t.Policies, t.Images, t.Jobs}
}

func (t Types) workloads() []string { return []string{t.Deployments, t.StatefulSets, t.DaemonSets} }

// Config configures Run.
type Config struct {
	// Source is the Kubernetes source whose objects the controller reads.
	Source string
	// Types are the watched type names (default DefaultTypes).
	Types Types
	// HelperImage is weft's image, holding weft-noop, for pull Jobs.
	HelperImage string
	// HelperBinary is weft-noop's path in HelperImage (default
	// job.DefaultHelperBinary).
	HelperBinary string
	// Kube and Dynamic reach the API server.
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Resync is how often every PrePullImage, workload and policy is looked
	// at again without a change (default 1m): the safety net.
	Resync time.Duration
	// SlotTTL is how long a pull Job's slot outlives its holder's last
	// renewal (default slots.DefaultTTL).
	SlotTTL time.Duration
	// SlotPoll is how soon a pull Job waiting for a full limit is looked
	// at again when no freed slot woke it first (default DefaultSlotPoll).
	SlotPoll time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DefaultResync is Config.Resync's default.
const DefaultResync = time.Minute

func (c *Config) defaults() error {
	var errs []error
	if c.Source == "" {
		errs = append(errs, errors.New("no source"))
	} else if err := msg.ValidToken(c.Source); err != nil {
		errs = append(errs, fmt.Errorf("source: %w", err))
	}
	if c.Kube == nil || c.Dynamic == nil {
		errs = append(errs, errors.New("no Kubernetes clients"))
	}
	if c.HelperImage == "" {
		errs = append(errs, errors.New("no helper image (weft's image, for pull Jobs)"))
	}
	if c.Types == (Types{}) {
		c.Types = DefaultTypes
	}
	for _, t := range c.Types.all() {
		if err := msg.ValidToken(t); err != nil {
			errs = append(errs, fmt.Errorf("type %q: %w", t, err))
		}
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.SlotPoll == 0 {
		c.SlotPoll = DefaultSlotPoll
	}
	if c.SlotPoll < 0 {
		errs = append(errs, fmt.Errorf("slot poll must be positive, got %v", c.SlotPoll))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: config: %w", Service, err)
	}
	return nil
}
