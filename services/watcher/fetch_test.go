package watcher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher"
)

// TestOnDemandSecrets keeps Secrets on demand: the bucket holds metadata and
// data keys but no data, and weft.api.fetch.<source> returns the body.
func TestOnDemandSecrets(t *testing.T) {
	k := kubetest.Start(t)
	ctx := context.Background()
	if _, err := k.Clientset.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "site-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("CERT"), "tls.key": []byte("KEY")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(fmt.Appendf(nil, `
sources: [{name: k, type: kubernetes, kubeconfig: %s}]
watched_resources:
  secrets: {api_version: v1, kind: Secret, store: on-demand, field_selector: "type=kubernetes.io/tls"}
targets: {}
`, k.Kubeconfig), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bus := testkit.NATS(t)
	env := testkit.NewEnv(t, bus, "w")
	testkit.Run(t, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
	kv, _ := bus.JS.KeyValue(ctx, msg.BucketResources)
	key := msg.ResourceKey("k", "secrets", "default", "site-tls")
	testkit.Eventually(t, 20*time.Second, func() error {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return err
		}
		if strings.Contains(string(e.Value()), "Q0VSVA") || strings.Contains(string(e.Value()), `"data"`) {
			t.Fatalf("an on-demand Secret's data reached the bucket: %s", e.Value())
		}
		if !strings.Contains(string(e.Value()), "tls.crt") {
			return fmt.Errorf("no data keys in %s", e.Value())
		}
		return nil
	})
	req, _ := msg.NewMsg(msg.FetchSubject("k"), "", msg.FetchRequest{Type: "secrets", Namespace: "default", Name: "site-tls"})
	var rep msg.FetchReply
	testkit.Eventually(t, 10*time.Second, func() error {
		resp, err := bus.NC.RequestMsg(req, 5*time.Second)
		if err != nil {
			return err
		}
		rep = msg.FetchReply{}
		return msg.Decode(resp.Data, &rep)
	})
	data, _ := rep.Object["data"].(map[string]any)
	if rep.Error != "" || data["tls.crt"] != "Q0VSVA==" {
		t.Fatalf("fetch reply = %+v", rep)
	}
	missing, _ := msg.NewMsg(msg.FetchSubject("k"), "", msg.FetchRequest{Type: "secrets", Namespace: "default", Name: "nope"})
	resp, err := bus.NC.RequestMsg(missing, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep = msg.FetchReply{}
	if err := msg.Decode(resp.Data, &rep); err != nil || !strings.Contains(rep.Error, "not found") {
		t.Fatalf("fetch of a missing secret = %+v %v", rep, err)
	}
}
