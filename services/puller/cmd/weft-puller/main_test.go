package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/imagetest"
)

// TestAgentCommand runs the weft-puller binary as a node agent on real
// parts: it takes an order from NATS, pulls through containerd, publishes
// the outcome, and serves its metrics and readiness.
func TestAgentCommand(t *testing.T) {
	bin := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	sock := imagetest.Containerd(t)
	kube := testkit.Kube(t)
	b := testkit.NATS(t)
	reg := imagetest.Registry(t)
	img := reg.PushPlain(t, "shop/web", "1")
	listen := freeAddr(t)
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
	}{
		{nil, 2, "usage: weft-puller <command>"},
		{[]string{"pull"}, 2, `unknown command "pull"`},
		{[]string{"agent"}, 2, "--node (or WEFT_NODE_NAME) is required"},
		{[]string{"agent", "--node", "n1", "--parallel", "0"}, 2, "--parallel must be >= 1"},
		{[]string{"agent", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"agent", "-h"}, 0, "-cri-socket"},
		{[]string{"-h"}, 0, "carry out the pull orders of one node"},
		{[]string{"controller", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"controller", "extra"}, 2, `unexpected arguments ["extra"]`},
		{[]string{"controller", "-h"}, 0, "-config"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
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

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
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
	listen := freeAddr(t)
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
	kube := testkit.Kube(t)
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
	first := testkit.StartProcess(t, bin, append(args, "--listen", freeAddr(t))...)
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
	testkit.StartProcess(t, bin, append(args, "--listen", freeAddr(t))...)
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
