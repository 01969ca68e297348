// Package configmap makes weft's own configuration come from a ConfigMap
// key: it watches that one ConfigMap and proposes every new content of the
// key (liveconfig.Propose), which validates it before it goes live; the
// last good configuration keeps running otherwise. A missing ConfigMap or
// key is reported in the log and the status, with the keys that exist.
package configmap

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/svc/liveconfig"
)

// ValidateTimeout bounds the validation of one candidate.
const ValidateTimeout = 30 * time.Second

// Watch follows s.ConfigMap's key s.ConfigKey until ctx is done. It is a
// host.ConfigMapWatcher.
func Watch(ctx context.Context, env svc.Env, s host.Settings) error {
	ns, name, ok := strings.Cut(s.ConfigMap, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("config map %q: want <namespace>/<name>", s.ConfigMap)
	}
	rc, err := kubeclient.RESTConfig(s.Kubeconfig, "")
	if err != nil {
		return fmt.Errorf("config map: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("config map: %w", err)
	}
	origin := "configmap " + s.ConfigMap
	updates := make(chan *corev1.ConfigMap, 1)
	push := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		select { // keep only the newest
		case <-updates:
		default:
		}
		updates <- cm
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := f.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    push,
		UpdateFunc: func(_, obj any) { push(obj) },
		DeleteFunc: func(any) {
			env.Log.Error("configuration ConfigMap deleted; the running configuration stays", "configmap", s.ConfigMap)
		},
	}); err != nil {
		return fmt.Errorf("config map: %w", err)
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	var last string
	for {
		select {
		case <-ctx.Done():
			return nil
		case cm := <-updates:
			yaml, ok := cm.Data[s.ConfigKey]
			if !ok {
				keys := make([]string, 0, len(cm.Data))
				for k := range cm.Data {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				err := fmt.Errorf("configmap %s has no key %q; available: %s", s.ConfigMap, s.ConfigKey, strings.Join(keys, ", "))
				env.Log.ErrorContext(ctx, "configuration not loaded", "err", err)
				writeProblem(ctx, env, origin, err)
				continue
			}
			if yaml == last {
				continue
			}
			last = yaml
			if _, err := liveconfig.Propose(ctx, env, yaml, origin, ValidateTimeout); err != nil {
				env.Log.ErrorContext(ctx, "configuration from the ConfigMap not activated", "err", err)
			}
		}
	}
}

func writeProblem(ctx context.Context, env svc.Env, origin string, err error) {
	kv, kerr := env.JS.KeyValue(ctx, msg.BucketStatus)
	if kerr != nil {
		return
	}
	var st msg.ConfigStatus
	_, _ = msg.LoadStatus(ctx, kv, msg.ConfigStatusKey, &st) // keep Active
	st.Candidate, st.OK, st.Origin, st.At = "-", false, origin, time.Now().UTC()
	st.Problems = []msg.Problem{{Severity: "error", Message: err.Error()}}
	if data, eerr := msg.Encode(st); eerr == nil {
		_, _ = kv.Put(ctx, msg.ConfigStatusKey, data)
	}
}
