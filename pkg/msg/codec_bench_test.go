package msg_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// BenchmarkDecodeResource: msg.Decode of a stored EndpointSlice of 16
// endpoints beside json.Unmarshal of the same bytes into the same type
// (the floor: one parse, no schema check, no validation).
func BenchmarkDecodeResource(b *testing.B) {
	var eps []any
	for i := range 16 {
		eps = append(eps, map[string]any{"addresses": []any{fmt.Sprintf("10.0.%d.%d", i/250, i%250)},
			"conditions": map[string]any{"ready": true}, "nodeName": fmt.Sprintf("node-%d", i)})
	}
	r := msg.Resource{Source: "cluster", Type: "endpoints", Namespace: "shop", Name: "app-x1y2z", Hash: "0123456789abcdef",
		Object: map[string]any{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
			"metadata":  map[string]any{"name": "app-x1y2z", "namespace": "shop", "labels": map[string]any{"kubernetes.io/service-name": "app"}},
			"endpoints": eps, "ports": []any{map[string]any{"name": "http", "port": 8080, "protocol": "TCP"}}}}
	data, err := msg.Encode(r)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("msg.Decode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var got msg.Resource
			if err := msg.Decode(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal-reference", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var got msg.Resource
			if err := json.Unmarshal(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
