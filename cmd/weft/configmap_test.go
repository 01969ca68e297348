package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/svc/liveconfig"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/watcher/configmap"
)

// TestConfigurationFromConfigMap keeps weft.yaml in a ConfigMap, followed by
// the watcher's configmap package and judged by the validator: the first
// content goes live, a broken edit is refused with the template and line and
// the good configuration stays, a missing key is reported with the keys that
// exist, and a fixed edit goes live.
func TestConfigurationFromConfigMap(t *testing.T) {
	k := kubetest.Start(t)
	b := testkit.NATS(t)
	env := testkit.NewEnv(t, b, "w")
	good, err := os.ReadFile("../../examples/quickstart/weft.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(good, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, func(ctx context.Context) error { return validator.Run(ctx, env.Env, cfg) })
	ctx := context.Background()
	cms := k.Clientset.CoreV1().ConfigMaps("default")
	put := func(data map[string]string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "weft", Namespace: "default"}, Data: data}
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	status := func() msg.ConfigStatus {
		kv, _ := b.JS.KeyValue(ctx, msg.BucketStatus)
		var st msg.ConfigStatus
		_, _ = msg.LoadStatus(ctx, kv, msg.ConfigStatusKey, &st)
		return st
	}
	put(map[string]string{"weft.yaml": string(good)})
	testkit.Run(t, func(ctx context.Context) error {
		return configmap.Watch(ctx, env.Env, host.Settings{ConfigMap: "default/weft", ConfigKey: "weft.yaml", Kubeconfig: k.Kubeconfig})
	})
	goodHash := liveconfig.Hash(string(good))
	testkit.Eventually(t, 30*time.Second, func() error {
		if st := status(); st.Active != goodHash || !st.OK {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	steps := []struct {
		name string
		data map[string]string
		want string
	}{
		{"broken template", map[string]string{"weft.yaml": strings.Replace(string(good), "# <host><path> -> backend, matched exactly", "{% for %}", 1)}, `template "exact.map" line 1`},
		{"missing key", map[string]string{"other.yaml": "x"}, `configmap default/weft has no key "weft.yaml"; available: other.yaml`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			put(st.data)
			testkit.Eventually(t, 30*time.Second, func() error {
				s := status()
				for _, p := range s.Problems {
					if strings.Contains(p.Message, st.want) {
						if s.Active != goodHash || s.OK {
							return fmt.Errorf("status %+v: the good configuration must stay active", s)
						}
						return nil
					}
				}
				return fmt.Errorf("status %+v lacks %q", s, st.want)
			})
		})
	}
	fixed := strings.Replace(string(good), "timeout client 30s", "timeout client 31s", 1)
	put(map[string]string{"weft.yaml": fixed})
	testkit.Eventually(t, 30*time.Second, func() error {
		if st := status(); st.Active != liveconfig.Hash(fixed) || !st.OK {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}
