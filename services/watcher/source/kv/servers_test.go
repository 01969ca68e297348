package kv

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
)

// process is a server run as a child process, restartable on the same
// ports and data.
type process struct {
	t    testing.TB
	name string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *testkit.SyncBuffer
}

func (p *process) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.t.Fatalf("%s already running", p.name)
	}
	cmd := exec.Command(p.args[0], p.args[1:]...)
	p.out = &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.cmd = cmd
}

// stop kills the server (an outage, not a clean shutdown) and waits for it.
func (p *process) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

// etcd

// etcdBinary returns the etcd server of the test control plane
// (hack/envtest builds it; its go.mod pins the version). The server's
// module cannot be a dependency of this module: the Kubernetes libraries
// the module also uses require a newer etcd, which the server does not
// build with.
func etcdBinary(t testing.TB) string {
	t.Helper()
	return kubetest.Binary(t, "etcd")
}

// etcdServer is a single-member etcd on 127.0.0.1, with its data in a
// test folder so that it can be stopped and started again.
type etcdServer struct {
	*process
	url    string
	client *clientv3.Client
}

func startEtcd(t testing.TB, extra ...string) *etcdServer {
	t.Helper()
	bin := etcdBinary(t)
	client := "http://127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	peer := "http://127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	args := append([]string{bin,
		"--name", "test",
		"--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test=" + peer,
		"--log-level", "error",
	}, extra...)
	e := &etcdServer{process: &process{t: t, name: "etcd", args: args}, url: client}
	t.Cleanup(e.stop)
	e.start()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e.client = c
	return e
}

// start starts the server and waits until it serves.
func (e *etcdServer) start() {
	e.t.Helper()
	e.process.start()
	testkit.Eventually(e.t, 30*time.Second, func() error {
		resp, err := http.Get(e.url + "/health")
		if err != nil {
			return fmt.Errorf("%v\n%s", err, e.output())
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})
}

func (e *etcdServer) put(t testing.TB, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.client.Put(ctx, key, value); err != nil {
		t.Fatalf("etcd put %s: %v", key, err)
	}
}

func (e *etcdServer) del(t testing.TB, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.client.Delete(ctx, key); err != nil {
		t.Fatalf("etcd delete %s: %v", key, err)
	}
}

// redis

func redisBinary(t testing.TB) string {
	t.Helper()
	return testkit.Program(t, "redis-server (apt-get install redis-server)", "redis-server", "/usr/bin/redis-server")
}

// redisServer is a redis-server on 127.0.0.1 without persistence: a
// restart empties it.
type redisServer struct {
	*process
	addr   string
	client *redis.Client
}

func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	port := testkit.FreePort(t)
	args := append([]string{redisBinary(t),
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
	}, extra...)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	r := &redisServer{process: &process{t: t, name: "redis", args: args}, addr: addr}
	t.Cleanup(r.stop)
	var pass string
	for i, a := range extra {
		if a == "--requirepass" && i+1 < len(extra) {
			pass = extra[i+1]
		}
	}
	r.client = redis.NewClient(&redis.Options{Addr: addr, Password: pass, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = r.client.Close() })
	r.start()
	return r
}

// start starts the server and waits until it answers.
func (r *redisServer) start() {
	r.t.Helper()
	r.process.start()
	testkit.Eventually(r.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := r.client.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%v\n%s", err, r.output())
		}
		return nil
	})
}

func (r *redisServer) do(t testing.TB, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.client.Do(ctx, args...).Err(); err != nil && err != redis.Nil {
		t.Fatalf("redis %v: %v", args, err)
	}
}

// zookeeper

// zkServer is a ZooKeeper server with a client to change its znodes.
type zkServer struct {
	*testkit.ZooKeeper
	conn *zk.Conn
}

func startZooKeeper(t testing.TB) *zkServer {
	t.Helper()
	srv := testkit.StartZooKeeper(t)
	conn, _, err := zk.Connect([]string{srv.Addr}, 10*time.Second, zk.WithLogger(zkNopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return &zkServer{ZooKeeper: srv, conn: conn}
}

// put sets the znode key to value, creating it and its missing parents
// (empty) in one transaction, so that no parent is ever seen as a leaf.
func (z *zkServer) put(t testing.TB, key, value string, acl ...zk.ACL) {
	t.Helper()
	if len(acl) == 0 {
		acl = zk.WorldACL(zk.PermAll)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		ok, _, err := z.conn.Exists(key)
		if err != nil {
			return err
		}
		if ok {
			_, err = z.conn.Set(key, []byte(value), -1)
			return err
		}
		var ops []any
		segs := strings.Split(strings.TrimPrefix(key, "/"), "/")
		for i := range segs[:len(segs)-1] {
			p := "/" + strings.Join(segs[:i+1], "/")
			ok, _, err := z.conn.Exists(p)
			if err != nil {
				return err
			}
			if !ok {
				ops = append(ops, &zk.CreateRequest{Path: p, Acl: zk.WorldACL(zk.PermAll)})
			}
		}
		ops = append(ops, &zk.CreateRequest{Path: key, Data: []byte(value), Acl: acl})
		_, err = z.conn.Multi(ops...)
		return err
	})
}

func (z *zkServer) del(t testing.TB, key string) {
	t.Helper()
	if err := z.conn.Delete(key, -1); err != nil {
		t.Fatalf("zookeeper delete %s: %v", key, err)
	}
}
