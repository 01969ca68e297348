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

// list returns every object of type typ, by key order, in one read of
// the bucket (lastValues).
func (o objects) list(ctx context.Context, typ string) ([]map[string]any, error) {
	last, err := lastValues(ctx, o.kv, msg.ResourcePrefix(o.source, typ)+"*.*")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", typ, err)
	}
	keys := make([]string, 0, len(last))
	for k := range last {
		if _, _, _, _, err := msg.ParseResourceKey(k); err == nil {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]map[string]any, 0, len(keys))
	for _, k := range keys {
		var r msg.Resource
		if err := msg.Decode(last[k], &r); err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		out = append(out, r.Object)
	}
	return out, nil
}

// lastValues returns the value of every key of kv matching filter, by
// key. It is one read of the bucket's stream (a watch of the keys, up to
// the values they hold now), not a request per key: reading 200 Nodes, or
// 200 nodes' pull status, costs the round trips of reading 2.
func lastValues(ctx context.Context, kv jetstream.KeyValue, filter string) (map[string][]byte, error) {
	w, err := msg.Watch(ctx, kv, []string{filter})
	if err != nil {
		return nil, err
	}
	defer msg.StopWatch(w)
	last := map[string][]byte{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil, errors.New("the bucket's watch ended before its last value")
			case e == nil: // every key's value up to now is in
				return last, nil
			case e.Operation() != jetstream.KeyValuePut:
				delete(last, e.Key())
			default:
				last[e.Key()] = e.Value()
			}
		}
	}
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
