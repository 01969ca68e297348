package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/watcher/relay"
)

// TestHandleReadsHashFromHeaders announces a write with the hash and
// resource version its headers carry, without decoding its value, and a
// write made without those headers with the ones its value holds.
func TestHandleReadsHashFromHeaders(t *testing.T) {
	key := msg.ResourceKey("k", "services", "shop", "web")
	value, err := msg.Encode(msg.Resource{Source: "k", Type: "services", Namespace: "shop", Name: "web", ResourceVersion: "7", Hash: "fromvalue", Object: map[string]any{"a": 1.0}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		value    []byte
		headers  map[string]string
		hash, rv string
	}{
		// A value the relay could not decode: the headers are all it reads.
		{"headers", []byte("not read"), map[string]string{msg.HeaderResourceHash: "fromheader", msg.HeaderResourceVersion: "9"}, "fromheader", "9"},
		{"no resource version", []byte("not read"), map[string]string{msg.HeaderResourceHash: "fromheader"}, "fromheader", ""},
		{"written without the headers", value, nil, "fromvalue", "7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			bus := testkit.NATS(t)
			m := nats.NewMsg(msg.ResourceSubject(key))
			m.Data = c.value
			for k, v := range c.headers {
				m.Header.Set(k, v)
			}
			if _, err := bus.JS.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
			cons, _, err := relay.Consumer(ctx, bus.JS)
			if err != nil {
				t.Fatal(err)
			}
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			written := <-batch.Messages()
			if written == nil {
				t.Fatalf("no write fetched: %v", batch.Error())
			}
			if err := relay.New(bus.JS).Handle(ctx, written); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			changes, err := bus.JS.Stream(ctx, msg.StreamChanges)
			if err != nil {
				t.Fatal(err)
			}
			got, err := changes.GetLastMsgForSubject(ctx, msg.ChangeSubject("k", "services"))
			if err != nil {
				t.Fatal(err)
			}
			var change msg.Change
			if err := msg.Decode(got.Data, &change); err != nil {
				t.Fatal(err)
			}
			if change.Op != msg.OpPut || change.Hash != c.hash || change.ResourceVersion != c.rv || change.Key != key {
				t.Errorf("change %+v, want a put of %s with hash %q and resource version %q", change, key, c.hash, c.rv)
			}
		})
	}
}
