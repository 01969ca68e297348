package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/deployer"
	"github.com/weftio/weft/services/renderer"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/watcher"
)

// webhookConfig puts an annotation of each Ingress into its backend
// unescaped: an annotation HAProxy does not take makes the whole
// configuration refused.
func webhookConfig(t *testing.T, kubeconfig, dir, policy string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
sources: [{name: k, type: kubernetes, kubeconfig: %s}]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress, namespace: default, enable_validation_webhook: true}
  configmaps: {api_version: v1, kind: ConfigMap, namespace: default}
validation_webhook: {timeout: 6s, failure_policy: %s}
targets:
  lb:
    base: %s
    validate: {kinds: [haproxy, template], timeout: 4s}
    deploy: {driver: files, dest: out}
    haproxy_config:
      template: |
        global
          maxconn 100
        {%%- for _, cm in resources.configmaps.items() %%}
          {{ cm.get("data", {}).get("global-line", "") }}
        {%%- endfor %%}
        defaults
          mode http
          timeout connect 1s
          timeout client 1s
          timeout server 1s
        frontend f
          bind 127.0.0.1:18099
          default_backend be_default
        backend be_default
          server s0 127.0.0.1:8080
        {%%- for id, ing in resources.ingresses.items() %%}
        {%%- set ann = ing.metadata.get("annotations", {}) %%}
        {%%- if ann.get("weft.io/weight") == "0" %%}{%% do register_error("ingresses", id, "weight 0 sends no traffic") %%}{%%- endif %%}
        # share {{ 100 // (ann.get("weft.io/parts", "1") | int) }}
        backend be_{{ ing.metadata.name }}
          {{ ing.metadata.get("annotations", {}).get("weft.io/backend-line", "") }}
          server s1 127.0.0.1:8080
        {%%- endfor %%}
        # configmaps: {{ resources.configmaps | length }}
`, kubeconfig, policy, filepath.Join(dir, "out"))
	cfg, err := config.Parse([]byte(y), dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func ingress(name, line string) *networkingv1.Ingress {
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{"weft.io/backend-line": line}},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: 80}},
		}},
	}
}

// TestValidationWebhookOnAPIServer: the real kube-apiserver calls the
// renderer's webhook over TLS. An Ingress whose annotation would make
// HAProxy refuse the configuration is refused by Create and by Update with
// haproxy's error; a good one is admitted and deployed; a ConfigMap (a
// type without enable_validation_webhook) is admitted whatever it holds.
// With the validators stopped, failure_policy fail refuses and ignore
// admits. Each service runs on its own NATS user, and the server refuses
// nothing.
func TestValidationWebhookOnAPIServer(t *testing.T) {
	testkit.HAProxy(t)
	k := kubetest.Start(t)
	wh := k.InstallWebhooks(t, filepath.Join("testdata", "webhook", "validating.yaml"))
	ctx := context.Background()
	dir := t.TempDir()
	cfg := webhookConfig(t, k.Kubeconfig, dir, config.FailurePolicyFail)
	// Every service on its own NATS user, as generated from the access
	// table: the server must refuse nothing the dry runs do.
	url, keys, v := usersServer(t)
	bus := roleBus(t, url, keys, msg.RoleAdmin, v)
	wenv := testkit.NewEnv(t, roleBus(t, url, keys, msg.RoleWatcher, v), "wh")
	testkit.Run(t, func(ctx context.Context) error { return watcher.Run(ctx, wenv.Env, cfg) })
	denv := testkit.NewEnv(t, roleBus(t, url, keys, msg.RoleDeployer, v), "wh")
	testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, denv.Env, cfg) })
	venv := testkit.NewEnv(t, roleBus(t, url, keys, msg.RoleValidator, v), "wh-validator")
	stopValidator := testkit.Run(t, func(ctx context.Context) error { return validator.Run(ctx, venv.Env, cfg) })
	rbus := roleBus(t, url, keys, msg.RoleRenderer, v)
	renv := testkit.NewEnv(t, rbus, "wh-renderer")
	opts := renderer.Options{WebhookListen: wh.Addr, WebhookCert: wh.CertFile, WebhookKey: wh.KeyFile}
	stopRenderer := testkit.Run(t, func(ctx context.Context) error { return opts.Run(ctx, renv.Env, cfg) })
	ings := k.Clientset.NetworkingV1().Ingresses("default")
	out := filepath.Join(dir, "out", "haproxy.cfg")

	// Until the renderer has read every source, it cannot decide: refused.
	waitFor(t, "a good Ingress admitted", func() error {
		_, err := ings.Create(ctx, ingress("good", "timeout server 5s"), metav1.CreateOptions{})
		return err
	})
	waitFor(t, "the good Ingress deployed", func() error {
		data, _ := os.ReadFile(out)
		return contains(string(data), "backend be_good\n  timeout server 5s")
	})

	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: admitted", what)
		}
		t.Logf("%s refused: %v", what, err)
		for _, want := range []string{"denied the request", "lb: haproxy: haproxy.cfg:", "frobnicate"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: error %q does not name %q", what, err, want)
			}
		}
	}
	_, err := ings.Create(ctx, ingress("bad", "frobnicate yes"), metav1.CreateOptions{})
	refused("create", err)
	if _, err := ings.Get(ctx, "bad", metav1.GetOptions{}); err == nil {
		t.Fatal("the refused Ingress exists")
	}
	good, err := ings.Get(ctx, "good", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good.Annotations["weft.io/backend-line"] = "frobnicate yes"
	_, err = ings.Update(ctx, good, metav1.UpdateOptions{})
	refused("update", err)

	// What the object makes the render report (register_error) or fail
	// on refuses it too.
	zero := ingress("zero", "timeout server 5s")
	zero.Annotations["weft.io/weight"] = "0"
	_, err = ings.Create(ctx, zero, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "lb: template: weight 0 sends no traffic") {
		t.Fatalf("an Ingress the template registers an error for: got %v", err)
	}
	split := ingress("split", "timeout server 5s")
	split.Annotations["weft.io/parts"] = "0"
	_, err = ings.Create(ctx, split, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "lb: render: ") || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("an Ingress the render fails on: got %v", err)
	}
	t.Logf("render failure refused: %v", err)

	cms := k.Clientset.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "any"}, Data: map[string]string{"x": "frobnicate yes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a ConfigMap (no webhook on its type) was refused: %v", err)
	}
	if n := testkit.LabeledValue(t, renv.Registry, "weft_renderer_webhook_requests_total", map[string]string{"result": "ignored"}); n < 1 {
		t.Fatalf("ignored requests = %v, want the ConfigMap's", n)
	}
	if n := testkit.LabeledValue(t, renv.Registry, "weft_renderer_webhook_requests_total", map[string]string{"type": "ingresses", "result": "refused"}); n != 4 {
		t.Fatalf("refused requests = %v, want 4", n)
	}
	data, _ := os.ReadFile(out)
	if strings.Contains(string(data), "frobnicate") {
		t.Fatalf("a refused object reached the deployed configuration:\n%s", data)
	}

	// A state refused already (a ConfigMap, without the webhook, breaks
	// the global section): an Ingress is refused only for the problems it
	// adds.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "breaker"}, Data: map[string]string{"global-line": "frobnicate-global yes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the broken state refused", func() error {
		var vs msg.ValidationStatus
		if _, err := msg.LoadStatus(ctx, kv, msg.ValidationStatusKey("lb"), &vs); err != nil {
			return err
		}
		if vs.OK || !strings.Contains(fmt.Sprint(vs.Problems), "frobnicate-global") {
			return fmt.Errorf("validation status %+v", vs)
		}
		return nil
	})
	if _, err := ings.Create(ctx, ingress("fine", "timeout server 7s"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("an Ingress adding no problem to a refused state was refused: %v", err)
	}
	_, err = ings.Create(ctx, ingress("worse", "frobnicate yes"), metav1.CreateOptions{})
	refused("create on a refused state", err)
	if strings.Contains(err.Error(), "frobnicate-global") {
		t.Fatalf("the refusal names a problem the state had already: %v", err)
	}
	if err := cms.Delete(ctx, "breaker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the fixed state deployed", func() error {
		data, _ := os.ReadFile(out)
		return contains(string(data), "backend be_fine")
	})
	names, err := msg.NewBundleStore(bus.JS).Names(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasPrefix(name, msg.DryRunObjectName("")) {
			t.Errorf("a dry run's bundle was left in the store: %s", name)
		}
	}

	// Validators down: failure_policy fail refuses, ignore admits.
	stopValidator()
	_, err = ings.Create(ctx, ingress("later", "timeout server 6s"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "could not validate") || !strings.Contains(err.Error(), "no answer from haproxy, template") {
		t.Fatalf("validators down, failure_policy fail: got %v, want a refusal naming the kinds that did not answer", err)
	}
	if n := testkit.LabeledValue(t, renv.Registry, "weft_renderer_webhook_requests_total", map[string]string{"type": "ingresses", "result": "undecided-refused"}); n < 1 {
		t.Fatalf("undecided-refused requests = %v", n)
	}
	stopRenderer()
	ignore := webhookConfig(t, k.Kubeconfig, dir, config.FailurePolicyIgnore)
	ienv := testkit.NewEnv(t, rbus, "wh-renderer-2")
	testkit.Run(t, func(ctx context.Context) error { return opts.Run(ctx, ienv.Env, ignore) })
	waitFor(t, "failure_policy ignore admits", func() error {
		_, err := ings.Create(ctx, ingress("later", "timeout server 6s"), metav1.CreateOptions{})
		return err
	})
	if n := testkit.LabeledValue(t, ienv.Registry, "weft_renderer_webhook_requests_total", map[string]string{"type": "ingresses", "result": "undecided-admitted"}); n < 1 {
		t.Fatalf("undecided-admitted requests = %v", n)
	}
}
