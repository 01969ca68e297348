package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/imagetest"
	"github.com/weftio/weft/pkg/testkit/kubetest"
)

// TestAgentCommand runs the weft-puller binary as a node agent on real
// parts: it takes an order from NATS, pulls through containerd, publishes
// the outcome, and serves its metrics and readiness.
func TestAgentCommand(t *testing.T) {
	bin := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	sock := imagetest.Containerd(t)
	kube := kubetest.Start(t)
	b := testkit.NATS(t)
	reg := imagetest.Registry(t)
	img := reg.PushPlain(t, "shop/web", "1")
	listen := testkit.FreeAddr(t)
	p := testkit.StartProcess(t, bin, "agent", "--node", "n1", "--cri-socket", sock, "--nats-url", b.URL,
		"--kubeconfig", kube.Kubeconfig, "--listen", listen, "--log-level", "debug")

	o := msg.PullOrder{PullTarget: msg.PullTarget{Namespace: "shop", Name: "web", UID: "u1", Image: img.Ref, Node: "n1", Attempt: 1},
		Mode: msg.PullModeCRI, Deadline: time.Now().Add(time.Minute)}
	if _, err := bus.Publish(context.Background(), b.JS, msg.PullSubject("n1"), o.ID(), o); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		if done, err := p.Exited(); done {
			t.Fatalf("weft-puller exited: %v\n%s", err, p.Output())
		}
		s, err := b.JS.Stream(context.Background(), msg.StreamPulled)
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(context.Background(), msg.PulledSubject("n1"))
		if err != nil {
			return err
		}
		var out msg.Pulled
		if err := msg.Decode(m.Data, &out); err != nil {
			return err
		}
		if out.Outcome != msg.PullOutcomePulled || out.ImageRef != img.ID {
			return fmt.Errorf("outcome %+v", out)
		}
		return nil
	})
	testkit.Eventually(t, 30*time.Second, func() error {
		body, err := get("http://" + listen + "/metrics")
		if err != nil {
			return err
		}
		for _, want := range []string{`weft_puller_agent_pulls_total{outcome="pulled"} 1`, `weft_puller_agent_messages_total{outcome="ack",stage="pulls"} 1`} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		_, err = get("http://" + listen + "/readyz")
		return err
	})
}

// TestCommandLine: a wrong command line exits 2 saying what is wrong; -h
// exits 0.
func TestCommandLine(t *testing.T) {
	bin := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	cases := []struct {
		args []string
		code int
		want string
		env  []string
	}{
		{nil, 2, "usage: weft-puller <command>", nil},
		{[]string{"pull"}, 2, `unknown command "pull"`, nil},
		{[]string{"agent"}, 2, "--node (or WEFT_NODE_NAME) is required", nil},
		{[]string{"agent", "--node", "n1", "--parallel", "0"}, 2, "--parallel must be >= 1", nil},
		{[]string{"agent", "--bogus"}, 2, "flag provided but not defined: -bogus", nil},
		{[]string{"agent", "--node", "n1", "--slot-ttl", "20s"}, 2, "--slot-ttl must be in (0, 15s], got 20s", nil},
		{[]string{"agent", "--node", "n1", "--queue-retry", "0s"}, 2, "--queue-retry must be positive", nil},
		{[]string{"agent", "--node", "n1"}, 2, `WEFT_SLOT_TTL="ten" is not a duration`, []string{"WEFT_SLOT_TTL=ten"}},
		{[]string{"agent", "-h"}, 0, "-slot-ttl", nil},
		{[]string{"agent", "-h"}, 0, "-cri-socket", nil},
		{[]string{"agent", "-h"}, 0, "-nats-nkey", nil},
		{[]string{"agent", "-h"}, 0, "-nats-tls-ca", nil},
		{[]string{"agent", "-h"}, 0, "-provision", nil},
		{[]string{"agent", "--node", "n1", "--nats-user", "u"}, 2, "--nats-user and --nats-password go together", nil},
		{[]string{"-h"}, 0, "carry out the pull orders of one node", nil},
		{[]string{"controller", "--bogus"}, 2, "flag provided but not defined: -bogus", nil},
		{[]string{"controller", "extra"}, 2, `unexpected arguments ["extra"]`, nil},
		{[]string{"controller", "-h"}, 0, "-config", nil},
		{[]string{"gate", "-h"}, 0, "-tls-cert", nil},
		{[]string{"gate", "-h"}, 0, "-webhook-listen", nil},
		{[]string{"gate", "-h"}, 0, "-kubeconfig", nil},
		{[]string{"gate", "-h"}, 0, "-nats-nkey", nil},
		{[]string{"gate", "--bogus"}, 2, "flag provided but not defined: -bogus", nil},
		{[]string{"gate", "extra"}, 2, `unexpected arguments ["extra"]`, nil},
		{[]string{"gate", "--release-interval", "0s"}, 2, "--release-interval must be positive", nil},
		{[]string{"gate", "--tls-cert", ""}, 2, "--tls-cert and --tls-key (or WEFT_TLS_CERT and WEFT_TLS_KEY) are required", nil},
		{[]string{"gate"}, 2, `WEFT_RELEASE_INTERVAL="soon" is not a duration`, []string{"WEFT_RELEASE_INTERVAL=soon"}},
		{[]string{"-h"}, 0, "the rollout gate", nil},
	}
	for _, tc := range cases {
		t.Run(strings.Join(append(tc.env, tc.args...), " "), func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, tc.env...)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(string(out), tc.want) {
				t.Fatalf("exit %d, output:\n%s\nwant exit %d saying %q", code, out, tc.code, tc.want)
			}
		})
	}
}

func get(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}

// TestAgentNotReadyWithoutRuntime: an agent whose runtime does not answer
// on its socket says so on /readyz.
func TestAgentNotReadyWithoutRuntime(t *testing.T) {
	bin := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	b := testkit.NATS(t)
	dir := t.TempDir()
	kubeconfig := dir + "/kubeconfig"
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := testkit.FreeAddr(t)
	p := testkit.StartProcess(t, bin, "agent", "--node", "n1", "--cri-socket", dir+"/none.sock", "--nats-url", b.URL,
		"--kubeconfig", kubeconfig, "--listen", listen)
	testkit.Eventually(t, 30*time.Second, func() error {
		if done, err := p.Exited(); done {
			t.Fatalf("weft-puller exited: %v\n%s", err, p.Output())
		}
		body, err := get("http://" + listen + "/readyz")
		if err == nil {
			return fmt.Errorf("ready without a runtime: %s", body)
		}
		if !strings.Contains(body, "cri") || !strings.Contains(body, "does not answer") {
			// Not ready for another reason (NATS, the consumer) so far.
			return fmt.Errorf("/readyz: %v", err)
		}
		return nil
	})
}

// TestAgentKilledMidPull: an agent SIGKILLed while it pulls leaves its
// order unacknowledged; the agent that takes its place gets it within the
// consumer's AckWait and carries it out, in the same attempt.
func TestAgentKilledMidPull(t *testing.T) {
	bin := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	sock := imagetest.Containerd(t)
	kube := kubetest.Start(t)
	b := testkit.NATS(t)
	// Layer downloads hang while held: the first agent dies in the pull.
	var held atomic.Bool
	hanging := make(chan struct{}, 16)
	reg := imagetest.Registry(t, imagetest.WithMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if held.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				hanging <- struct{}{}
				for held.Load() && r.Context().Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
			next.ServeHTTP(w, r)
		})
	}))
	img := reg.PushPlain(t, "shop/web", "1")
	held.Store(true)
	args := []string{"agent", "--node", "n1", "--cri-socket", sock, "--nats-url", b.URL, "--kubeconfig", kube.Kubeconfig}
	first := testkit.StartProcess(t, bin, append(args, "--listen", testkit.FreeAddr(t))...)
	o := msg.PullOrder{PullTarget: msg.PullTarget{Namespace: "shop", Name: "web", UID: "u1", Image: img.Ref, Node: "n1", Attempt: 1},
		Mode: msg.PullModeCRI, Deadline: time.Now().Add(2 * time.Minute)}
	if _, err := bus.Publish(context.Background(), b.JS, msg.PullSubject("n1"), o.ID(), o); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hanging:
	case <-time.After(time.Minute):
		t.Fatalf("the first agent never pulled:\n%s", first.Output())
	}
	kv, err := b.JS.KeyValue(context.Background(), msg.BucketPulls)
	if err != nil {
		t.Fatal(err)
	}
	before := pullState(t, kv, o)
	if before.Phase != msg.PullPulling {
		t.Fatalf("status while pulling: %+v", before)
	}
	first.Kill(t)
	held.Store(false)
	testkit.StartProcess(t, bin, append(args, "--listen", testkit.FreeAddr(t))...)
	testkit.Eventually(t, time.Minute, func() error {
		st := pullState(t, kv, o)
		if st.Phase != msg.PullPulled {
			return fmt.Errorf("status %+v", st)
		}
		if st.ImageRef != img.ID || st.Attempts != 1 || !st.Started.Equal(before.Started) {
			t.Fatalf("status %+v: want the image %s pulled in the first attempt, started %v", st, img.ID, before.Started)
		}
		return nil
	})
}

// pullStateOrNone is pullState, or nothing while no status was written.
func pullStateOrNone(t *testing.T, kv jetstream.KeyValue, o msg.PullOrder) msg.ImagePull {
	t.Helper()
	if _, err := kv.Get(context.Background(), msg.PullStatusKey(o.Namespace, o.Name, o.Node)); errors.Is(err, jetstream.ErrKeyNotFound) {
		return msg.ImagePull{}
	}
	return pullState(t, kv, o)
}

func pullState(t *testing.T, kv jetstream.KeyValue, o msg.PullOrder) msg.ImagePull {
	t.Helper()
	e, err := kv.Get(context.Background(), msg.PullStatusKey(o.Namespace, o.Name, o.Node))
	if err != nil {
		t.Fatal(err)
	}
	var st msg.PullStatus
	if err := msg.Decode(e.Value(), &st); err != nil {
		t.Fatal(err)
	}
	p, _ := st.Image(o.Image)
	return p
}

// slotOp is one change of a slot key, as a watch of the leases bucket saw it.
type slotOp struct {
	key, value string
	op         jetstream.KeyValueOp
}

// watchSlots records every change of every slot key from now on.
func watchSlots(t *testing.T, b *testkit.Bus) func() []slotOp {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kv, err := b.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchFiltered(ctx, []string{msg.SlotKeyPrefix + ">"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ops []slotOp
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			mu.Lock()
			ops = append(ops, slotOp{key: e.Key(), value: string(e.Value()), op: e.Operation()})
			mu.Unlock()
		}
	}()
	return func() []slotOp {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ops)
	}
}

// holdingRegistry is a registry whose layer downloads hang while held,
// saying on hanging when one does.
func holdingRegistry(t *testing.T) (reg *imagetest.ImageRegistry, held *atomic.Bool, hanging chan struct{}) {
	held, hanging = &atomic.Bool{}, make(chan struct{}, 64)
	reg = imagetest.Registry(t, imagetest.WithMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if held.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				select {
				case hanging <- struct{}{}:
				default:
				}
				for held.Load() && r.Context().Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
			next.ServeHTTP(w, r)
		})
	}))
	return reg, held, hanging
}

// TestAgentKilledHoldingSlots: the pull slots of an agent SIGKILLed in a
// pull are adopted by the agent that takes its order over (not freed and
// taken anew: the keys are never deleted in between), and, when nobody
// takes the order over, come back by themselves within the slot TTL, to
// an order of another node that waited for them.
func TestAgentKilledHoldingSlots(t *testing.T) {
	bin := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	sock := imagetest.Containerd(t)
	kube := kubetest.Start(t)
	order := func(uid, image, node string, limits msg.PullLimits) msg.PullOrder {
		return msg.PullOrder{PullTarget: msg.PullTarget{Namespace: "shop", Name: "web-" + uid, UID: uid, Image: image, Node: node, Attempt: 1},
			Mode: msg.PullModeCRI, Deadline: time.Now().Add(3 * time.Minute), Limits: limits}
	}
	publish := func(t *testing.T, b *testkit.Bus, o msg.PullOrder) {
		t.Helper()
		if _, err := bus.Publish(context.Background(), b.JS, msg.PullSubject(o.Node), o.ID(), o); err != nil {
			t.Fatal(err)
		}
	}
	agentArgs := func(b *testkit.Bus, node, ttl, listen string) []string {
		return []string{"agent", "--node", node, "--cri-socket", sock, "--nats-url", b.URL, "--kubeconfig", kube.Kubeconfig,
			"--ack-wait", "2s", "--slot-ttl", ttl, "--queue-retry", "200ms", "--listen", listen}
	}

	t.Run("adopted by the agent that takes the order over", func(t *testing.T) {
		b := testkit.NATS(t)
		reg, held, hanging := holdingRegistry(t)
		img := reg.PushPlain(t, "shop/adopt", "1")
		ops := watchSlots(t, b)
		held.Store(true)
		// The longest TTL: the slots cannot expire while the order passes
		// from the dead agent to the next (AckWait 2 s).
		first := testkit.StartProcess(t, bin, agentArgs(b, "n1", "15s", testkit.FreeAddr(t))...)
		o := order("u1", img.Ref, "n1", msg.PullLimits{Cluster: 1, PerNode: 1, PerRegistry: 1})
		publish(t, b, o)
		select {
		case <-hanging:
		case <-time.After(time.Minute):
			t.Fatalf("the first agent never pulled:\n%s", first.Output())
		}
		keys := []string{msg.SlotKey(msg.ClusterSlotScope, 0), msg.SlotKey(msg.NodeSlotScope("n1"), 0), msg.SlotKey(msg.RegistrySlotScope(reg.Host), 0)}
		kv, err := b.JS.KeyValue(context.Background(), msg.BucketLeases)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if e, err := kv.Get(context.Background(), k); err != nil || string(e.Value()) != o.ID() {
				t.Fatalf("slot %s while the first agent pulls: %v %v, want held by %s", k, e, err, o.ID())
			}
		}
		first.Kill(t)
		held.Store(false)
		second := testkit.StartProcess(t, bin, agentArgs(b, "n1", "15s", testkit.FreeAddr(t))...)
		pulls, err := b.JS.KeyValue(context.Background(), msg.BucketPulls)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, func() error {
			if st := pullState(t, pulls, o); st.Phase != msg.PullPulled || st.ImageRef != img.ID {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		// Released at the end: every key's last change is its deletion.
		testkit.Eventually(t, 30*time.Second, func() error {
			for _, k := range keys {
				if e, err := kv.Get(context.Background(), k); !errors.Is(err, jetstream.ErrKeyNotFound) {
					return fmt.Errorf("slot %s after the pull: %v %v", k, e, err)
				}
			}
			return nil
		})
		for _, k := range keys {
			var seen []string
			for _, op := range ops() {
				if op.key != k {
					continue
				}
				switch {
				case op.op == jetstream.KeyValuePut && op.value == o.ID():
					seen = append(seen, "put")
				case op.op == jetstream.KeyValuePut:
					t.Fatalf("slot %s held by %q, want only %s", k, op.value, o.ID())
				default:
					seen = append(seen, op.op.String())
				}
			}
			t.Logf("slot %s went %v", k, seen)
			if len(seen) < 2 || slices.Index(seen, "put") != 0 || slices.IndexFunc(seen, func(s string) bool { return s != "put" }) != len(seen)-1 {
				t.Fatalf("slot %s went %v: want held by the order from its first take to its release, never freed in between", k, seen)
			}
		}
		if !strings.Contains(second.Output(), `"msg":"image pulled"`) {
			t.Fatalf("the second agent did not pull:\n%s", second.Output())
		}
	})

	t.Run("freed within the TTL when nobody takes the order over", func(t *testing.T) {
		b := testkit.NATS(t)
		reg, held, hanging := holdingRegistry(t)
		img1 := reg.PushPlain(t, "shop/dead", "1")
		img2 := reg.PushPlain(t, "shop/waits", "1")
		ops := watchSlots(t, b)
		held.Store(true)
		first := testkit.StartProcess(t, bin, agentArgs(b, "n1", "3s", testkit.FreeAddr(t))...)
		o1 := order("u1", img1.Ref, "n1", msg.PullLimits{Cluster: 1})
		publish(t, b, o1)
		select {
		case <-hanging:
		case <-time.After(time.Minute):
			t.Fatalf("the first agent never pulled:\n%s", first.Output())
		}
		listen := testkit.FreeAddr(t)
		testkit.StartProcess(t, bin, agentArgs(b, "n2", "3s", listen)...)
		o2 := order("u2", img2.Ref, "n2", msg.PullLimits{Cluster: 1})
		publish(t, b, o2)
		pulls, err := b.JS.KeyValue(context.Background(), msg.BucketPulls)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, func() error {
			if st := pullStateOrNone(t, pulls, o2); st.Phase != msg.PullPending || st.Message != "waiting for a pull slot: all 1 slots of cluster are held" {
				return fmt.Errorf("n2's status %+v, want waiting for the slot", st)
			}
			return nil
		})
		first.Kill(t)
		held.Store(false)
		testkit.Eventually(t, time.Minute, func() error {
			if st := pullState(t, pulls, o2); st.Phase != msg.PullPulled || st.ImageRef != img2.ID {
				return fmt.Errorf("n2's status %+v", st)
			}
			return nil
		})
		// The dead agent's slot expired (a marker, not its release), then
		// n2's order took it.
		key := msg.SlotKey(msg.ClusterSlotScope, 0)
		var seen []string
		for _, op := range ops() {
			if op.key == key {
				seen = append(seen, op.op.String()+" "+op.value)
			}
		}
		t.Logf("slot %s went %q", key, seen)
		expired := slices.IndexFunc(seen, func(s string) bool { return !strings.HasPrefix(s, "KeyValuePutOp") })
		took := slices.Index(seen, "KeyValuePutOp "+o2.ID())
		if expired < 0 || took < expired || slices.Contains(seen[:expired], "KeyValuePutOp "+o2.ID()) {
			t.Fatalf("slot %s went %q: want the dead agent's slot gone by its TTL before n2's order took it", key, seen)
		}
		if st := pullState(t, pulls, o1); st.Phase != msg.PullPulling {
			t.Fatalf("n1's status %+v: its order waits for an agent of n1", st)
		}
		// n2's agent counted the wait, and holds nothing now.
		testkit.Eventually(t, 30*time.Second, func() error {
			body, err := get("http://" + listen + "/metrics")
			if err != nil {
				return err
			}
			for _, want := range []string{`weft_puller_agent_queued_pulls 0`, `weft_puller_agent_slots_held{scope="cluster"} 0`, `weft_puller_agent_limit_full_total{scope="cluster"} `} {
				if !strings.Contains(body, want) {
					return fmt.Errorf("/metrics lacks %s", want)
				}
			}
			return nil
		})
	})
}
