package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/health"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/services/puller/agent"
	"github.com/weftio/weft/services/puller/cri"
)

// agentConfig is the agent's typed configuration: flags over WEFT_*
// environment variables over defaults.
type agentConfig struct {
	Node       string        // WEFT_NODE_NAME (a DaemonSet sets it from spec.nodeName)
	CRISocket  string        // WEFT_CRI_SOCKET
	NATSURL    string        // WEFT_NATS_URL
	Listen     string        // WEFT_LISTEN
	Kubeconfig string        // WEFT_KUBECONFIG; empty: $KUBECONFIG, else in-cluster
	LogLevel   string        // WEFT_LOG_LEVEL
	Replicas   int           // WEFT_REPLICAS
	Parallel   int           // WEFT_PULL_PARALLEL
	AckWait    time.Duration // WEFT_ACK_WAIT
	SlotTTL    time.Duration // WEFT_SLOT_TTL
	QueueRetry time.Duration // WEFT_QUEUE_RETRY
	NATS       natsauth.Client
	Provision  bool // WEFT_PROVISION

	envErrs []error // WEFT_* values that do not parse
}

func (c *agentConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Node, "node", env("WEFT_NODE_NAME", ""), "the node whose pull orders this agent carries out (required) [WEFT_NODE_NAME]")
	fs.StringVar(&c.CRISocket, "cri-socket", env("WEFT_CRI_SOCKET", "/run/containerd/containerd.sock"), "the container runtime's CRI socket [WEFT_CRI_SOCKET]")
	fs.StringVar(&c.NATSURL, "nats-url", env("WEFT_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL [WEFT_NATS_URL]")
	fs.StringVar(&c.Listen, "listen", env("WEFT_LISTEN", "127.0.0.1:9090"), "address of /healthz, /readyz and /metrics [WEFT_LISTEN]")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", env("WEFT_KUBECONFIG", ""), "kubeconfig to read pull secrets with (empty: $KUBECONFIG, else in-cluster) [WEFT_KUBECONFIG]")
	fs.StringVar(&c.LogLevel, "log-level", env("WEFT_LOG_LEVEL", "info"), "debug, info, warn or error [WEFT_LOG_LEVEL]")
	fs.IntVar(&c.Replicas, "replicas", envInt("WEFT_REPLICAS", 1), "JetStream replicas for streams and buckets [WEFT_REPLICAS]")
	fs.IntVar(&c.Parallel, "parallel", envInt("WEFT_PULL_PARALLEL", agent.DefaultParallel), "orders carried out at once [WEFT_PULL_PARALLEL]")
	fs.DurationVar(&c.AckWait, "ack-wait", c.envDuration("WEFT_ACK_WAIT", agent.DefaultAckWait), "how soon an order whose agent died is delivered again [WEFT_ACK_WAIT]")
	fs.DurationVar(&c.SlotTTL, "slot-ttl", c.envDuration("WEFT_SLOT_TTL", slots.DefaultTTL),
		fmt.Sprintf("how long a pull slot outlives its holder's last renewal: how soon a dead agent's slots come back (at most %v) [WEFT_SLOT_TTL]", msg.LeaseTTL))
	fs.DurationVar(&c.QueueRetry, "queue-retry", c.envDuration("WEFT_QUEUE_RETRY", agent.DefaultQueueRetry), "how soon, on average, an order waiting for a pull slot is looked at again [WEFT_QUEUE_RETRY]")
	c.NATS.Flags(fs)
	fs.BoolVar(&c.Provision, "provision", envBool("WEFT_PROVISION", true), "create or update the streams, buckets and stores at start (false: `weft provision` made them) [WEFT_PROVISION]")
}

func (c agentConfig) check() error {
	errs := append([]error(nil), c.envErrs...)
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
	if c.Replicas < 1 {
		errs = append(errs, fmt.Errorf("--replicas must be >= 1, got %d", c.Replicas))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if _, err := c.NATS.Options(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func runAgent(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("weft-puller agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c agentConfig
	c.flags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if err := c.check(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveAgent(ctx, c, stderr)
}

// serveAgent connects to NATS and the API server, provisions the streams
// and buckets, serves /healthz, /readyz and /metrics, and runs the agent
// until ctx is done.
func serveAgent(ctx context.Context, c agentConfig, stderr io.Writer) error {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel))
	log := telemetry.NewLogger(stderr, level)
	// Taken before anything starts, so a busy address is the one error.
	l, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("%s (/healthz, /readyz and /metrics) cannot be listened on; change it with --listen or WEFT_LISTEN: %w", c.Listen, err)
	}
	_ = l.Close()
	kube, err := kubeClient(c.Kubeconfig)
	if err != nil {
		return err
	}
	runtime, err := cri.Dial(c.CRISocket)
	if err != nil {
		return err
	}
	defer func() { _ = runtime.Close() }()
	auth, err := c.NATS.Options()
	if err != nil {
		return err
	}
	refused := make(chan error, 1)
	nc, err := nats.Connect(c.NATSURL, append([]nats.Option{nats.Name("weft-puller-agent " + c.Node), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), natsauth.LogErrors(log, refused)}, auth...)...)
	if err != nil {
		return fmt.Errorf("connect %s: %w", c.NATSURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if c.Provision {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = natsauth.Provision(pctx, js, c.Replicas, refused)
		cancel()
		if err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tp := telemetry.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	checks := health.NewChecks()
	checks.Func("nats", func() error {
		if !nc.IsConnected() {
			return errors.New("not connected to NATS")
		}
		return nil
	})
	checks.Func("cri", func() error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return runtime.Ping(ctx)
	})
	env := svc.Env{NC: nc, JS: js, Log: log, Registry: reg, Tracer: tp, Health: checks, Replica: svc.ReplicaName()}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := health.Serve(gctx, c.Listen, checks.Handler(reg), func(a net.Addr) {
			log.Info("serving /healthz, /readyz and /metrics", "addr", a.String())
		})
		if err != nil {
			return fmt.Errorf("serve %s (--listen or WEFT_LISTEN): %w", c.Listen, err)
		}
		return nil
	})
	g.Go(func() error {
		return agent.Run(gctx, env, agent.Options{Node: c.Node, Runtime: runtime, Secrets: agent.KubeSecrets{Client: kube}, Parallel: c.Parallel,
			AckWait: c.AckWait, SlotTTL: c.SlotTTL, QueueRetry: c.QueueRetry})
	})
	err = g.Wait()
	log.Info("stopped", "err", err)
	return err
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

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// envDuration is key's duration, or def when unset; a value that does
// not parse is an error check reports.
func (c *agentConfig) envDuration(key string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q is not a duration (such as 10s)", key, v))
		return def
	}
	return d
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

func envBool(key string, def bool) bool {
	if v, err := strconv.ParseBool(os.Getenv(key)); err == nil {
		return v
	}
	return def
}
