package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/envflag"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/services/puller/gate"
	"github.com/weftio/weft/services/puller/gate/release"
	"github.com/weftio/weft/services/puller/gate/webhook"
)

const (
	gateName = "weft-puller gate"
	// gateCheck is the readiness check of the gate: the view has read the
	// resources bucket and the serving certificate is loaded.
	gateCheck = "gate"
	// defaultReleaseInterval is how often the release looks at every
	// gated pod without a gate timing out sooner.
	defaultReleaseInterval = 5 * time.Second
)

// gateConfig is the gate's own configuration, beside the common settings
// of every weft binary: flags over WEFT_* variables over defaults.
type gateConfig struct {
	TLSCert       string        // WEFT_TLS_CERT
	TLSKey        string        // WEFT_TLS_KEY
	WebhookListen string        // WEFT_WEBHOOK_LISTEN
	Interval      time.Duration // WEFT_RELEASE_INTERVAL
	Kubeconfig    string        // the common --kubeconfig (WEFT_KUBECONFIG)
}

func (c *gateConfig) flags(fs *flag.FlagSet, env *envflag.Defaults) {
	fs.StringVar(&c.TLSCert, "tls-cert", env.String("WEFT_TLS_CERT", "/etc/weft-gate-tls/tls.crt"), "the webhook's serving certificate (PEM, with its chain), read again when it changes [WEFT_TLS_CERT]")
	fs.StringVar(&c.TLSKey, "tls-key", env.String("WEFT_TLS_KEY", "/etc/weft-gate-tls/tls.key"), "the serving certificate's key (PEM), read again when it changes [WEFT_TLS_KEY]")
	fs.StringVar(&c.WebhookListen, "webhook-listen", env.String("WEFT_WEBHOOK_LISTEN", webhook.DefaultAddr), "address of the admission webhook (HTTPS, path "+webhook.DefaultPath+") [WEFT_WEBHOOK_LISTEN]")
	fs.DurationVar(&c.Interval, "release-interval", env.Duration("WEFT_RELEASE_INTERVAL", defaultReleaseInterval), "how often every gated pod is looked at (a gate timing out sooner is looked at then) [WEFT_RELEASE_INTERVAL]")
}

func (c *gateConfig) check(host.Settings) error {
	var errs []error
	if c.TLSCert == "" || c.TLSKey == "" {
		errs = append(errs, errors.New("--tls-cert and --tls-key (or WEFT_TLS_CERT and WEFT_TLS_KEY) are required: the API server calls the webhook over HTTPS"))
	}
	if c.WebhookListen == "" {
		errs = append(errs, errors.New("--webhook-listen (or WEFT_WEBHOOK_LISTEN) is required"))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("--release-interval must be positive, got %v", c.Interval))
	}
	return errors.Join(errs...)
}

// runGate runs the rollout gate: the admission webhook adding the gate and
// the release removing it, on weft.yaml's puller section, with the common
// settings of every weft binary (--config, --nats-url, --listen, ...).
func runGate(args []string, stderr io.Writer) error {
	var c gateConfig
	s, err := command{name: gateName, flags: c.flags, check: c.check}.parse(args, stderr)
	if err != nil {
		return err
	}
	c.Kubeconfig = s.Kubeconfig
	return serve(s, host.Binary{
		Name:     gateName,
		Services: []host.Service{{Name: "puller-gate", Run: c.run}},
	})
}

// run serves the webhook and runs the release on cfg until ctx ends. It is
// ready once the view has read the resources bucket (the certificate is
// loaded before anything is served).
func (c gateConfig) run(ctx context.Context, env svc.Env, cfg *config.Config) error {
	// One check, replaced as the gate goes: not ready until the serving
	// certificate is loaded and the view has read the bucket.
	env.Health.Func(gateCheck, func() error { return errors.New("the gate is starting") })
	defer env.Health.Func(gateCheck, func() error { return errors.New("the gate stopped") })
	if cfg.Puller == nil {
		return errors.New("weft.yaml has no puller section: the gate reads the puller's types")
	}
	types, bucketTypes, err := gateTypes(cfg)
	if err != nil {
		return err
	}
	if types.ReplicaSets == "" {
		env.Log.Warn("gate: weft.yaml watches no ReplicaSets; a Deployment's pod is found by its pod-template-hash label only")
	}
	kube, dyn, closeKube, err := c.kubeClients(cfg)
	if err != nil {
		return err
	}
	defer closeKube()
	view := gate.NewView(env.JS, types, env.Log)
	hook, err := webhook.New(view, webhook.Options{Addr: c.WebhookListen, CertFile: c.TLSCert, KeyFile: c.TLSKey}, env.Log, env.Registry)
	if err != nil {
		return fmt.Errorf("%w (--tls-cert, --tls-key)", err)
	}
	events, stopEvents := release.NewRecorder(kube)
	defer stopEvents()
	state := release.BucketState{JS: env.JS, Types: bucketTypes}
	rel, err := release.New(state, kube, dyn, events, env.Log, env.Registry)
	if err != nil {
		return err
	}
	env.Health.Func(gateCheck, func() error {
		if !view.Ready() {
			return gate.ErrNotReady
		}
		return nil
	})
	env.Log.Info("gate: serving the webhook and releasing gates", "webhook", c.WebhookListen, "path", webhook.DefaultPath,
		"pods", bucketTypes.Pods, "policies", bucketTypes.Policies, "images", bucketTypes.Images, "interval", c.Interval)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return view.Run(gctx) })
	g.Go(func() error { return hook.Run(gctx) })
	g.Go(func() error { return rel.Run(gctx, c.Interval) })
	return g.Wait()
}

// kubeClients reach the API server the gate writes to: --kubeconfig when
// given, else the puller section's source (its kubeconfig and context;
// none: in-cluster), the cluster whose pods the watcher writes.
func (c gateConfig) kubeClients(cfg *config.Config) (kubernetes.Interface, dynamic.Interface, func(), error) {
	path, kctx := c.Kubeconfig, ""
	if path == "" {
		for _, s := range cfg.Sources {
			if s.Name == cfg.Puller.Source {
				path, kctx = s.Kubeconfig, s.Context
			}
		}
	}
	rc, err := kubeclient.RESTConfig(path, kctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("gate: %w", err)
	}
	rc, hc, dialer, err := kubeclient.OwnConnections(rc, "weft-puller-gate")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("gate: %w", err)
	}
	kube, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		dialer.CloseAll()
		return nil, nil, nil, fmt.Errorf("gate: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(rc, hc)
	if err != nil {
		dialer.CloseAll()
		return nil, nil, nil, fmt.Errorf("gate: %w", err)
	}
	return kube, dyn, dialer.CloseAll, nil
}

// gateTypes names the watched types the gate reads: the puller section's
// policies, workloads, Namespaces and PrePullImages, the ReplicaSets and
// the gated pods weft.yaml watches (see pickType).
func gateTypes(cfg *config.Config) (gate.Types, release.BucketTypes, error) {
	types := gate.Types{
		Policies:     config.PullerPolicies,
		Deployments:  config.PullerDeployments,
		StatefulSets: config.PullerStatefulSets,
		DaemonSets:   config.PullerDaemonSets,
		Namespaces:   config.PullerNamespaces,
		ReplicaSets:  pickType(cfg, "apps/v1", "ReplicaSet", nil),
	}
	gated := labels.Set{gate.Label: "true"}
	pods := pickType(cfg, "v1", "Pod", gated)
	if pods == "" {
		return gate.Types{}, release.BucketTypes{}, fmt.Errorf("weft.yaml watches no pods the gate holds: add a watched_resources type of api_version v1, kind Pod, label_selector %s, store full, no namespace", gate.Label)
	}
	return types, release.BucketTypes{Pods: pods, Policies: config.PullerPolicies, Images: config.PullerImages}, nil
}

// pickType returns the watched type of apiVersion and kind that holds
// every such object of every namespace whose labels are like (nil: every
// object) in full: of several, one with a label selector (it holds fewer
// objects), then the first by name; "" when none does.
func pickType(cfg *config.Config, apiVersion, kind string, like labels.Set) string {
	var best string
	bestSelects := false
	names := make([]string, 0, len(cfg.WatchedResources))
	for n := range cfg.WatchedResources {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		r := cfg.WatchedResources[n]
		if r.APIVersion != apiVersion || r.Kind != kind || r.Namespace != "" || r.FieldSelector != "" || r.Store != config.StoreFull {
			continue
		}
		sel, err := labels.Parse(r.LabelSelector)
		if err != nil {
			continue
		}
		selects := !sel.Empty()
		if selects && (like == nil || !sel.Matches(like)) {
			continue
		}
		if best == "" || selects && !bestSelects {
			best, bestSelects = n, selects
		}
	}
	return best
}
