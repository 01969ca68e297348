package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/weftio/weft/pkg/msg"
)

// objects reads watched objects from the resources bucket.
type objects struct {
	kv     jetstream.KeyValue
	source string
}

// get returns the object of type typ, or nil when the bucket has none.
func (o objects) get(ctx context.Context, typ, namespace, name string) (map[string]any, error) {
	e, err := o.kv.Get(ctx, msg.ResourceKey(o.source, typ, namespace, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %s/%s: %w", typ, namespace, name, err)
	}
	var r msg.Resource
	if err := msg.Decode(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("read %s %s/%s: %w", typ, namespace, name, err)
	}
	return r.Object, nil
}

// list returns every object of type typ, by key order.
func (o objects) list(ctx context.Context, typ string) ([]map[string]any, error) {
	lister, err := o.kv.ListKeysFiltered(ctx, msg.ResourcePrefix(o.source, typ)+"*.*")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", typ, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop() // the channel closed: the listing is complete
	sort.Strings(keys)
	var out []map[string]any
	for _, k := range keys {
		_, _, ns, name, err := msg.ParseResourceKey(k)
		if err != nil {
			continue
		}
		obj, err := o.get(ctx, typ, ns, name)
		if err != nil {
			return nil, err
		}
		if obj != nil {
			out = append(out, obj)
		}
	}
	return out, nil
}

// nodes returns every Node of type typ.
func (o objects) nodes(ctx context.Context, typ string) ([]corev1.Node, error) {
	objs, err := o.list(ctx, typ)
	if err != nil {
		return nil, err
	}
	out := make([]corev1.Node, 0, len(objs))
	for _, obj := range objs {
		var n corev1.Node
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &n); err != nil {
			return nil, fmt.Errorf("decode Node: %w", err)
		}
		out = append(out, n)
	}
	return out, nil
}

// node returns one Node, or nil.
func (o objects) node(ctx context.Context, typ, name string) (*corev1.Node, error) {
	obj, err := o.get(ctx, typ, "", name)
	if err != nil || obj == nil {
		return nil, err
	}
	var n corev1.Node
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &n); err != nil {
		return nil, fmt.Errorf("decode Node %s: %w", name, err)
	}
	return &n, nil
}
