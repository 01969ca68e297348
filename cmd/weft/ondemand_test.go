package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
)

// TestOnDemandSecretReachesTemplate keeps Secrets on demand: the bucket has
// no data, and a template gets the body with fetch(), which asks the
// watcher, which asks the API server.
func TestOnDemandSecretReachesTemplate(t *testing.T) {
	k := kubetest.Start(t)
	ctx := context.Background()
	if _, err := k.Clientset.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "site"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("CERT-BODY"), "tls.key": []byte("KEY")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	y := fmt.Sprintf(`
sources: [{name: k, type: kubernetes, kubeconfig: %s}]
watched_resources:
  secrets: {api_version: v1, kind: Secret, store: on-demand, field_selector: "type=kubernetes.io/tls"}
targets:
  t:
    validate: {kinds: [template]}
    deploy: {driver: files, dest: out}
    haproxy_config:
      template: |
        {%%- for _, s in resources.secrets.items() %%}
        # {{ s.metadata.name }} {{ fetch("secrets", s.metadata.namespace, s.metadata.name).data["tls.crt"] | b64decode }}
        {%%- endfor %%}
`, k.Kubeconfig)
	cfg, err := config.Parse([]byte(y), dir)
	if err != nil {
		t.Fatal(err)
	}
	bus := testkit.NATS(t)
	env := testkit.NewEnv(t, bus, "od")
	for _, sv := range Services {
		testkit.Run(t, func(ctx context.Context) error { return sv.Run(ctx, env.Env, cfg) })
	}
	waitFor(t, "fetched body deployed", func() error {
		data, _ := os.ReadFile(filepath.Join(dir, "out", "haproxy.cfg"))
		return contains(string(data), "# site CERT-BODY")
	})
}
