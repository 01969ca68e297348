package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/weftio/weft/pkg/msg"
)

// PutResource writes obj (an object with apiVersion, kind and metadata) to
// the resources bucket as the watcher's source named source writes it: a
// msg.Resource of type typ under msg.ResourceKey. It returns the key.
func PutResource(t testing.TB, js jetstream.JetStream, source, typ string, obj map[string]any) string {
	t.Helper()
	u := unstructured.Unstructured{Object: obj}
	key := msg.ResourceKey(source, typ, u.GetNamespace(), u.GetName())
	data, err := msg.Encode(msg.Resource{
		Source: source, Type: typ, Namespace: u.GetNamespace(), Name: u.GetName(),
		ResourceVersion: u.GetResourceVersion(), Hash: fmt.Sprintf("%s@%s", u.GetUID(), u.GetResourceVersion()),
		Origin: "test", Object: obj,
	})
	if err != nil {
		t.Fatalf("encode %s: %v", key, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return key
}

// DeleteResource deletes key from the resources bucket, as the watcher does
// when its object goes away.
func DeleteResource(t testing.TB, js jetstream.JetStream, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}
