package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// NATSServerVersion is the nats-server release the cluster runs: the one
// weft embeds (pkg/svc's go.mod), pinned by hack/natsserver.
const NATSServerVersion = "v2.15.2"

// Cluster credentials. Clients that give none land in the weft account,
// which has JetStream; the system account is for operator requests such as
// $JS.API.SERVER.REMOVE.
const (
	clusterSysUser = "sys"
	clusterSysPass = "sys"
)

// NATSServerBinary returns the path of a nats-server binary of
// NATSServerVersion, built from its Go module by hack/natsserver/build.sh
// into ${WEFT_CACHE:-$HOME/.cache/weft}/nats-server/<version> the first time
// (a few minutes on a cold Go cache) and taken from there afterwards.
// $WEFT_NATS_SERVER names a binary to use instead.
func NATSServerBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("WEFT_NATS_SERVER"); bin != "" {
		return bin
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the testkit source to find hack/natsserver")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "hack", "natsserver", "build.sh")
	cmd := exec.Command(script)
	var stderr SyncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build nats-server with %s: %v\n%s", script, err, stderr.String())
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "nats-server")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s did not build nats-server: %v", script, err)
	}
	return bin
}

// Cluster is a NATS cluster of nats-server processes on 127.0.0.1, with
// JetStream, for tests of replicas and failover: a single embedded server
// never serves a stale read and never loses a stream's node. Nodes are
// addressed by index (0..Size-1); each keeps its ports and store directory
// across Kill and Restart. Every process is killed when the test ends.
type Cluster struct {
	bin     string
	logDir  string
	name    string
	tempDir func() string

	mu    sync.Mutex
	nodes []*clusterNode
	seq   int // for the names of replacement nodes
}

type clusterNode struct {
	name                       string
	port, clusterPort, monPort int
	storeDir, confPath, log    string
	cmd                        *exec.Cmd
	done                       chan struct{} // closed once cmd has exited
}

// ClusterOption configures NATSCluster.
type ClusterOption func(*Cluster)

// ClusterLogDir writes each node's log to <dir>/<name>.log (default: a
// temporary folder of the test, shown in part when the test fails).
func ClusterLogDir(dir string) ClusterOption {
	return func(c *Cluster) { c.logDir = dir }
}

// NATSCluster starts a cluster of 3 nats-server processes named n1..n3 with
// routes between them and JetStream storage in temporary folders, and
// waits until JetStream has a meta leader and every node is healthy.
func NATSCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	c := &Cluster{bin: NATSServerBinary(t), name: "weft", seq: 3, tempDir: t.TempDir}
	for _, o := range opts {
		o(c)
	}
	if c.logDir == "" {
		c.logDir = t.TempDir()
	}
	for i := range 3 {
		n := &clusterNode{name: fmt.Sprintf("n%d", i+1), storeDir: t.TempDir()}
		var err error
		for _, p := range []*int{&n.port, &n.clusterPort, &n.monPort} {
			if *p, err = freePort(); err != nil {
				t.Fatal(err)
			}
		}
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, n := range c.nodes {
			n.stop()
			if t.Failed() {
				t.Logf("last lines of nats-server %s (%s):\n%s", n.name, n.log, Tail(n.log, 30))
			}
		}
	})
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	return c
}

// Size is the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// Name is the server name of node i.
func (c *Cluster) Name(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].name
}

// URLs are the client URLs of every node.
func (c *Cluster) URLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	}
	return urls
}

// URL is URLs joined by commas, as nats.Connect and --nats-url take them.
func (c *Cluster) URL() string { return strings.Join(c.URLs(), ",") }

// Bus connects to the cluster, to node first (then to the others as
// nodes go away: it reconnects forever), and closes the connection when
// the test ends. node < 0: any node.
func (c *Cluster) Bus(t testing.TB, node int) *Bus {
	t.Helper()
	urls := c.URLs()
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	if node >= 0 {
		urls = append([]string{urls[node]}, append(urls[:node:node], urls[node+1:]...)...)
		opts = append(opts, nats.DontRandomize())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &Bus{NC: nc, JS: js, URL: c.URL()}
}

// Provision makes every weft stream, bucket and store with 3 replicas
// through b, as a weft process starting on the cluster does.
func (c *Cluster) Provision(t testing.TB, b *Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := msg.Provision(ctx, b.JS, c.Size()); err != nil {
		t.Fatal(err)
	}
}

// LogPath is the file node i logs to.
func (c *Cluster) LogPath(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].log
}

// Running reports whether node i's process is up.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].running()
}

// Kill ends node i with SIGKILL: no shutdown, no flush. Its store stays for
// Restart.
func (c *Cluster) Kill(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if !n.running() {
		return fmt.Errorf("nats-server %s is not running", n.name)
	}
	n.stop()
	return nil
}

// Restart starts node i again on its ports and store directory, and waits
// until it reports healthy (JetStream current).
func (c *Cluster) Restart(i int) error {
	if err := c.start(i); err != nil {
		return err
	}
	return c.waitNode(i, time.Minute)
}

// Lose kills node i and deletes its store directory: the node is gone for
// good, as when a machine and its disk are lost. Replace brings a new one.
func (c *Cluster) Lose(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	n.stop()
	if err := os.RemoveAll(n.storeDir); err != nil {
		return fmt.Errorf("delete the store of %s: %w", n.name, err)
	}
	return nil
}

// Replace does what an operator does after Lose(i): it removes the lost
// server from the JetStream meta group ($JS.API.SERVER.REMOVE, as the
// system account) so that its replicas move elsewhere, and starts a fresh
// node with a new name (n4, n5, ...) and an empty store in its place, on
// the same ports. It returns the new node's name once it is healthy.
func (c *Cluster) Replace(i int) (string, error) {
	c.mu.Lock()
	old := c.nodes[i]
	if old.running() {
		c.mu.Unlock()
		return "", fmt.Errorf("nats-server %s still runs: Lose it first", old.name)
	}
	c.seq++
	fresh := *old
	fresh.name = fmt.Sprintf("n%d", c.seq)
	fresh.storeDir = c.tempDir()
	fresh.cmd, fresh.done = nil, nil
	c.nodes[i] = &fresh
	var others []string
	for j, n := range c.nodes {
		if j != i && n.running() {
			others = append(others, fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", clusterSysUser, clusterSysPass, n.port))
		}
	}
	c.mu.Unlock()
	if err := removePeer(strings.Join(others, ","), old.name); err != nil {
		return "", err
	}
	if err := c.start(i); err != nil {
		return "", err
	}
	return fresh.name, c.waitNode(i, 2*time.Minute)
}

// removePeer asks the meta leader, through the system account, to remove
// the server named peer, retrying while no leader answers.
func removePeer(urls, peer string) error {
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("connect as the system account: %w", err)
	}
	defer nc.Close()
	req, _ := json.Marshal(map[string]string{"peer": peer})
	deadline := time.Now().Add(time.Minute)
	for {
		err = func() error {
			reply, err := nc.Request("$JS.API.SERVER.REMOVE", req, 5*time.Second)
			if err != nil {
				return err
			}
			var r struct {
				Success bool `json:"success"`
				Error   *struct {
					Code        int    `json:"code"`
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(reply.Data, &r); err != nil {
				return fmt.Errorf("decode %q: %w", reply.Data, err)
			}
			if r.Error != nil {
				return fmt.Errorf("%d %s", r.Error.Code, r.Error.Description)
			}
			if !r.Success {
				return fmt.Errorf("no success in %q", reply.Data)
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove JetStream peer %s: %w", peer, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// WaitReady waits until every running node is healthy and agrees on a
// JetStream meta leader.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	for i := range c.nodes {
		if c.Running(i) {
			if err := c.waitNode(i, timeout); err != nil {
				return err
			}
		}
	}
	return nil
}

// MetaLeader is the name of the JetStream meta leader as node i sees it
// ("" when it knows none).
func (c *Cluster) MetaLeader(i int) (string, error) {
	c.mu.Lock()
	url := fmt.Sprintf("http://127.0.0.1:%d/jsz", c.nodes[i].monPort)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return "", fmt.Errorf("decode %s: %w", url, err)
	}
	if jsz.Meta == nil {
		return "", nil
	}
	return jsz.Meta.Leader, nil
}

// waitNode waits until node i answers /healthz with 200 (JetStream enabled
// and current with the meta group and its streams) and knows a meta leader.
func (c *Cluster) waitNode(i int, timeout time.Duration) error {
	c.mu.Lock()
	n := c.nodes[i]
	c.mu.Unlock()
	health := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.monPort)
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		err := Healthy(client, health)
		if err == nil {
			var leader string
			if leader, err = c.MetaLeader(i); err == nil && leader == "" {
				err = errors.New("no JetStream meta leader")
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-n.done:
			return fmt.Errorf("nats-server %s exited while starting; last lines of %s:\n%s", n.name, n.log, Tail(n.log, 20))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server %s not ready within %v: %w", n.name, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// start writes node i's configuration and starts its process.
func (c *Cluster) start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.running() {
		return fmt.Errorf("nats-server %s already runs", n.name)
	}
	var routes []string
	for _, o := range c.nodes {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.clusterPort))
	}
	conf := fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
jetstream {
  store_dir: %q
}
cluster {
  name: %q
  listen: "127.0.0.1:%d"
  routes: [%s]
}
accounts {
  SYS: { users: [{user: %q, password: %q}] }
  WEFT: { jetstream: enabled, users: [{user: "weft", password: "weft"}] }
}
system_account: SYS
no_auth_user: "weft"
`, n.name, n.port, n.monPort, n.storeDir, c.name, n.clusterPort, `"`+strings.Join(routes, `", "`)+`"`, clusterSysUser, clusterSysPass)
	n.confPath = filepath.Join(c.logDir, n.name+".conf")
	if err := os.WriteFile(n.confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	n.log = filepath.Join(c.logDir, n.name+".log")
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(c.bin, "-c", n.confPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, killed with the test process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server %s: %w", n.name, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	done := n.done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

func (n *clusterNode) running() bool {
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// stop sends SIGKILL to the node's process group and waits for it.
func (n *clusterNode) stop() {
	if !n.running() {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}

// WaitStreams waits, through b, until the JetStream meta layer answers
// (has a leader) and each named stream answers (has a leader): after a
// node is killed or restarted the streams it led elect new leaders, and
// so does the meta layer if the node led it (until then the JetStream API
// answers 503, "JetStream system temporarily unavailable", although a
// stream's own leader may already answer); a test's own reads and writes
// wait for them.
func (c *Cluster) WaitStreams(t testing.TB, b *Bus, names ...string) {
	t.Helper()
	Eventually(t, time.Minute, func() error {
		if _, err := b.JS.AccountInfo(context.Background()); err != nil {
			return fmt.Errorf("meta layer: %w", err)
		}
		for _, name := range names {
			s, err := b.JS.Stream(context.Background(), name)
			if err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			if _, err := s.Info(context.Background()); err != nil {
				return fmt.Errorf("stream %s: %w", name, err)
			}
		}
		return nil
	})
}
