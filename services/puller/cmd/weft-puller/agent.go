package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/envflag"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/services/puller/agent"
	"github.com/weftio/weft/services/puller/cri"
)

const agentName = "weft-puller agent"

// agentConfig is the agent's own configuration, beside the connection
// settings (host.Settings.ConnectionFlags): flags over WEFT_* environment
// variables over defaults.
type agentConfig struct {
	Node       string        // WEFT_NODE_NAME (a DaemonSet sets it from spec.nodeName)
	CRISocket  string        // WEFT_CRI_SOCKET
	Kubeconfig string        // WEFT_KUBECONFIG; empty: $KUBECONFIG, else in-cluster
	Parallel   int           // WEFT_PULL_PARALLEL
	AckWait    time.Duration // WEFT_ACK_WAIT
	SlotTTL    time.Duration // WEFT_SLOT_TTL
	QueueRetry time.Duration // WEFT_QUEUE_RETRY
}

func (c *agentConfig) flags(fs *flag.FlagSet, env *envflag.Defaults) {
	fs.StringVar(&c.Node, "node", env.String("WEFT_NODE_NAME", ""), "the node whose pull orders this agent carries out (required) [WEFT_NODE_NAME]")
	fs.StringVar(&c.CRISocket, "cri-socket", env.String("WEFT_CRI_SOCKET", "/run/containerd/containerd.sock"), "the container runtime's CRI socket [WEFT_CRI_SOCKET]")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", env.String("WEFT_KUBECONFIG", ""), "kubeconfig to read pull secrets with (empty: $KUBECONFIG, else in-cluster) [WEFT_KUBECONFIG]")
	fs.IntVar(&c.Parallel, "parallel", env.Int("WEFT_PULL_PARALLEL", agent.DefaultParallel), "orders carried out at once [WEFT_PULL_PARALLEL]")
	fs.DurationVar(&c.AckWait, "ack-wait", env.Duration("WEFT_ACK_WAIT", agent.DefaultAckWait), "how soon an order whose agent died is delivered again [WEFT_ACK_WAIT]")
	fs.DurationVar(&c.SlotTTL, "slot-ttl", env.Duration("WEFT_SLOT_TTL", slots.DefaultTTL),
		fmt.Sprintf("how long a pull slot outlives its holder's last renewal: how soon a dead agent's slots come back (at most %v) [WEFT_SLOT_TTL]", msg.LeaseTTL))
	fs.DurationVar(&c.QueueRetry, "queue-retry", env.Duration("WEFT_QUEUE_RETRY", agent.DefaultQueueRetry), "how soon, at the latest, an order waiting for a pull slot is looked at again should no freed slot wake it [WEFT_QUEUE_RETRY]")
}

func (c *agentConfig) check(s host.Settings) error {
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("--node (or WEFT_NODE_NAME) is required"))
	}
	if c.Parallel < 1 {
		errs = append(errs, fmt.Errorf("--parallel must be >= 1, got %d", c.Parallel))
	}
	if c.AckWait <= 0 {
		errs = append(errs, fmt.Errorf("--ack-wait must be positive, got %v", c.AckWait))
	}
	if c.SlotTTL <= 0 || c.SlotTTL > msg.LeaseTTL {
		errs = append(errs, fmt.Errorf("--slot-ttl must be in (0, %v], got %v", msg.LeaseTTL, c.SlotTTL))
	}
	if c.QueueRetry <= 0 {
		errs = append(errs, fmt.Errorf("--queue-retry must be positive, got %v", c.QueueRetry))
	}
	if s.Replicas < 1 {
		errs = append(errs, fmt.Errorf("--replicas must be >= 1, got %d", s.Replicas))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if _, err := s.NATS.Options(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// runAgent runs the node agent: it reaches the API server and the
// container runtime, then host.Run connects to NATS, provisions the
// streams and buckets, serves /healthz, /readyz and /metrics (with the
// runtime's own check) and runs the agent until SIGINT or SIGTERM.
func runAgent(args []string, stderr io.Writer) error {
	var c agentConfig
	s, err := command{name: agentName, noConfig: true, flags: c.flags, check: c.check}.parse(args, stderr)
	if err != nil {
		return err
	}
	// Taken before anything starts, so a busy address is the one error.
	if err := host.CheckAddrs(s.Addrs()...); err != nil {
		return err
	}
	kube, err := kubeClient(c.Kubeconfig)
	if err != nil {
		return err
	}
	runtime, err := cri.Dial(c.CRISocket)
	if err != nil {
		return err
	}
	defer func() { _ = runtime.Close() }()
	run := func(ctx context.Context, env svc.Env, _ *config.Config) error {
		env.Health.Func("cri", func() error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return runtime.Ping(ctx)
		})
		return agent.Run(ctx, env, agent.Options{Node: c.Node, Runtime: runtime, Secrets: agent.KubeSecrets{Client: kube}, Parallel: c.Parallel,
			AckWait: c.AckWait, SlotTTL: c.SlotTTL, QueueRetry: c.QueueRetry})
	}
	return serve(s, host.Binary{
		Name:       agentName,
		NoConfig:   true,
		Connection: "weft-puller-agent " + c.Node,
		Services:   []host.Service{{Name: agent.Service, Run: run}},
	})
}

// kubeClient reaches the API server: with path's kubeconfig, else
// $KUBECONFIG's, else in-cluster.
func kubeClient(path string) (kubernetes.Interface, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	var cfg *rest.Config
	var err error
	if path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client (--kubeconfig, $KUBECONFIG, else in-cluster): %w", err)
	}
	cfg.UserAgent = "weft-puller-agent"
	return kubernetes.NewForConfig(cfg)
}
