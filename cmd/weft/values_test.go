package main

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestValuesFromNATSKV feeds a template from a NATS KV bucket (a confd-style
// value source): a put and an update of the key reach the deployed file.
func TestValuesFromNATSKV(t *testing.T) {
	s := startStack(t, quickstart, func(y string) string {
		y = strings.Replace(y, "    rescan: 30s\n", "    rescan: 30s\n  - name: tuning\n    type: natskv\n    bucket: app-tuning\n    prefix: /haproxy\n", 1)
		return strings.Replace(y, "          timeout client 30s\n", "          timeout client {{ values.get('/timeouts/client', '30s') }}\n", 1)
	})
	ctx := context.Background()
	kv, err := s.bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "app-tuning"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first deploy with the default", func() error { return contains(s.read("haproxy.cfg"), "timeout client 30s") })
	if _, err := kv.PutString(ctx, "haproxy.timeouts.client", "45s"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "value deployed", func() error { return contains(s.read("haproxy.cfg"), "timeout client 45s") })
	if _, err := kv.PutString(ctx, "haproxy.timeouts.client", "50s"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "update deployed", func() error { return contains(s.read("haproxy.cfg"), "timeout client 50s") })
	if err := haproxyCheck(t, s.out("haproxy.cfg")); err != nil {
		t.Fatal(err)
	}
}
