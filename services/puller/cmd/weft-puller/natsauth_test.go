package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// TestControllerAndGateOnTheirOwnUsers runs `weft-puller controller` and
// `weft-puller gate` each on its own NATS user of a real nats-server whose
// users are what `weft nats-config` generates, with the watcher and the
// validator on theirs, every one with --provision=false after the
// provisioner made the streams: a job-mode policy's Deployment gets its
// PrePullImage and pull Job, a cri-mode one's a pull order for its node,
// a message the controller cannot decode is dead-lettered, the gate gates
// a new pod and releases it, an edit of weft.yaml is checked and swapped
// in by both, and neither the server nor any client saw an operation
// refused.
func TestControllerAndGateOnTheirOwnUsers(t *testing.T) {
	puller := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	watcher := testkit.GoBuild(t, "github.com/weftio/weft/services/watcher/cmd/weft-watcher")
	validator := testkit.GoBuild(t, "github.com/weftio/weft/services/validator/cmd/weft-validator")
	srv := testkit.NATSWithUsers(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := natsauth.Provision(ctx, srv.Connect(t, msg.RoleProvisioner).JS, 1, nil); err != nil {
		t.Fatal(err)
	}
	admin := srv.Connect(t, msg.RoleAdmin)

	kube, hooks := gateCluster(t, map[string]map[string]string{"web-1": nil})
	cs := kube.Clientset
	createPolicies(t, kube,
		v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a-job"}, Spec: v1alpha1.PrePullPolicySpec{Mode: v1alpha1.ModeJob,
			Workloads: v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"prepull": "job"}}}}},
		v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: "b-cri"}, Spec: v1alpha1.PrePullPolicySpec{Mode: v1alpha1.ModeCRI,
			Workloads: v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"prepull": "cri"}}}}},
		gatedPolicy("gated"))
	for _, d := range []struct{ name, prepull string }{{"web", "job"}, {"api", "cri"}} {
		kube.Deployment(t, "shop", d.name, map[string]string{"prepull": d.prepull},
			corev1.PodSpec{Containers: []corev1.Container{{Name: d.name, Image: "registry.example.com/" + d.name + ":1"}}})
	}
	pod := gatedDB(t, cs)

	// Each process follows its own copy of weft.yaml: processes that
	// follow one file all check an edit of it at once, and the validator
	// restarting on it interrupts its answers to the others.
	data, err := os.ReadFile(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string]string{}
	as := func(name string, role msg.Role, args ...string) []string {
		configs[name] = filepath.Join(t.TempDir(), "weft.yaml")
		if err := os.WriteFile(configs[name], data, 0o600); err != nil {
			t.Fatal(err)
		}
		return append(args, "--config", configs[name], "--nats-url", srv.URL, "--nats-nkey", natsauth.SeedFile(srv.Keys, role),
			"--provision=false", "--listen", testkit.FreeAddr(t))
	}
	procs := map[string]*testkit.Process{
		"watcher":    testkit.StartProcess(t, watcher, as("watcher", msg.RoleWatcher)...),
		"validator":  testkit.StartProcess(t, validator, as("validator", msg.RoleValidator, "--kinds", "template")...),
		"controller": testkit.StartProcess(t, puller, as("controller", msg.RolePullerController, "controller", "--log-level", "debug")...),
		"gate": testkit.StartProcess(t, puller, as("gate", msg.RolePullerGate, "gate", "--tls-cert", hooks.CertFile, "--tls-key", hooks.KeyFile,
			"--webhook-listen", hooks.Addr, "--release-interval", "1s", "--log-level", "debug")...),
	}
	alive := func() {
		for name, p := range procs {
			if done, err := p.Exited(); done {
				t.Fatalf("weft-%s exited: %v\n%s", name, err, p.Output())
			}
		}
	}

	// Mode job: a PrePullImage and a pull Job; mode cri: a pull order on
	// the node's subject.
	testkit.Eventually(t, 2*time.Minute, func() error {
		alive()
		list, err := kube.Client.Resource(v1alpha1.ImageResource).Namespace("shop").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		modes := map[v1alpha1.PullMode]int{}
		for _, u := range list.Items {
			var ppi v1alpha1.PrePullImage
			if err := v1alpha1.FromUnstructured(u.Object, &ppi); err != nil {
				return err
			}
			modes[ppi.Spec.Mode]++
		}
		if modes[v1alpha1.ModeJob] != 1 {
			return fmt.Errorf("PrePullImages by mode %v, want one of mode job", modes)
		}
		jobs, err := cs.BatchV1().Jobs("shop").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(jobs.Items) != 1 {
			return fmt.Errorf("%d pull Jobs, want one", len(jobs.Items))
		}
		return nil
	})
	testkit.Eventually(t, time.Minute, func() error {
		alive()
		s, err := admin.JS.Stream(context.Background(), msg.StreamPulls)
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(context.Background(), msg.PullSubject("web-1"))
		if err != nil {
			return fmt.Errorf("no pull order for web-1: %w", err)
		}
		var o msg.PullOrder
		if err := msg.Decode(m.Data, &o); err != nil {
			return err
		}
		if o.Mode != msg.PullModeCRI || o.Namespace != "shop" {
			return fmt.Errorf("pull order %+v", o)
		}
		return nil
	})

	// A change the controller cannot decode is dead-lettered under its
	// role's subject.
	if _, err := admin.JS.Publish(context.Background(), msg.ChangeSubject("cluster", config.PullerPolicies), []byte("not a change")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		alive()
		s, err := admin.JS.Stream(context.Background(), msg.StreamDLQ)
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(context.Background(), msg.DLQSubject(string(msg.RolePullerController)))
		if err != nil {
			return fmt.Errorf("no dead letter of the controller: %w", err)
		}
		var dl msg.DeadLetter
		if err := msg.Decode(m.Data, &dl); err != nil {
			return err
		}
		if dl.Subject != msg.ChangeSubject("cluster", config.PullerPolicies) {
			return fmt.Errorf("dead letter %+v", dl)
		}
		return nil
	})

	// The gate: a new pod of the gated StatefulSet is gated, then released
	// after the policy's gateTimeout.
	waitReleased(t, cs, createGated(t, cs, pod, alive).Name, alive)

	// An edit of weft.yaml: the process stores the candidate, asks the
	// validator, records the verdict and restarts its services on it.
	for _, name := range []string{"controller", "gate"} {
		if err := os.WriteFile(configs[name], append(data, "\n# edited\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, func() error {
			alive()
			if !strings.Contains(procs[name].Output(), "configuration changed; restarting services") {
				return fmt.Errorf("weft-puller %s did not swap in the edited weft.yaml", name)
			}
			return nil
		})
	}

	for name, p := range procs {
		if out := p.Output(); strings.Contains(out, "NATS refused") || strings.Contains(out, "Permissions Violation") {
			t.Errorf("the server refused weft-%s:\n%s", name, out)
		}
	}
	if log := srv.LogText(); strings.Contains(log, "Violation") {
		t.Fatalf("the server logged violations:\n%s", log)
	}
	select {
	case err := <-admin.Errs:
		t.Fatalf("the server sent the test's connection: %v", err)
	default:
	}
}
