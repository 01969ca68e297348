package release

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
)

// BucketTypes names the watched types (the <type> part of msg.ResourceKey)
// the watcher writes pods, policies and PrePullImages under. Only gated
// pods are needed: the pods' watched type can select them by label
// (label_selector: weft.io/gated).
type BucketTypes struct {
	Pods     string
	Policies string
	Images   string
}

// BucketState reads the State from the resources bucket, as the watcher
// wrote it, afresh on each call (level-based: a pass sees the bucket as it
// is, nothing cached between passes).
type BucketState struct {
	JS    jetstream.JetStream
	Types BucketTypes
}

// GatedPods lists the bucket's pods labelled gate.Label.
func (s BucketState) GatedPods(ctx context.Context) ([]corev1.Pod, error) {
	var out []corev1.Pod
	err := s.each(ctx, "*."+s.Types.Pods+".>", func(key string, obj map[string]any) error {
		var p corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &p); err != nil {
			return fmt.Errorf("pod %s: %w", key, err)
		}
		if _, ok := p.Labels[gate.Label]; ok {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// Policy returns the bucket's policy named name, nil when there is none
// (of several sources holding it, the first read).
func (s BucketState) Policy(ctx context.Context, name string) (*v1alpha1.PrePullPolicy, error) {
	var out *v1alpha1.PrePullPolicy
	err := s.each(ctx, "*."+s.Types.Policies+"."+msg.ClusterScope+"."+msg.KeyEscape(name), func(key string, obj map[string]any) error {
		var p v1alpha1.PrePullPolicy
		if err := v1alpha1.FromUnstructured(obj, &p); err != nil {
			return fmt.Errorf("policy %s: %w", key, err)
		}
		if out == nil {
			out = &p
		}
		return nil
	})
	return out, err
}

// Images lists the bucket's PrePullImages of namespace.
func (s BucketState) Images(ctx context.Context, namespace string) ([]v1alpha1.PrePullImage, error) {
	var out []v1alpha1.PrePullImage
	err := s.each(ctx, "*."+s.Types.Images+"."+msg.KeyEscape(namespace)+".*", func(key string, obj map[string]any) error {
		var p v1alpha1.PrePullImage
		if err := v1alpha1.FromUnstructured(obj, &p); err != nil {
			return fmt.Errorf("PrePullImage %s: %w", key, err)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// each calls f with the current object of every key matching filter. An
// object that does not decode (or that f refuses) is skipped and named in
// the error; the others are still read.
func (s BucketState) each(ctx context.Context, filter string, f func(key string, obj map[string]any) error) error {
	kv, err := s.JS.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		return fmt.Errorf("resources bucket: %w", err)
	}
	w, err := msg.Watch(ctx, kv, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read %s from the resources bucket: %w", filter, err)
	}
	defer msg.StopWatch(w)
	var errs []error
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("read %s from the resources bucket: the watch closed", filter)
			}
			if e == nil {
				return errors.Join(errs...)
			}
			var res msg.Resource
			if err := msg.Decode(e.Value(), &res); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", e.Key(), err))
				continue
			}
			if err := f(e.Key(), res.Object); err != nil {
				errs = append(errs, err)
			}
		}
	}
}
