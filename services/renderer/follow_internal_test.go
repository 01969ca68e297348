package renderer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/testkit"
)

// followRig is a follower over a real resources bucket, with the changes
// its writes announce (as the watcher's relay announces them: the key, the
// operation and the stream sequence of the write).
type followRig struct {
	t      *testing.T
	kv     jetstream.KeyValue
	stream jetstream.Stream
}

func newFollowRig(t *testing.T) *followRig {
	t.Helper()
	bus := testkit.NATS(t)
	ctx := context.Background()
	kv, err := bus.JS.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := bus.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	if err != nil {
		t.Fatal(err)
	}
	return &followRig{t: t, kv: kv, stream: stream}
}

func (g *followRig) follower() *follower {
	ix, err := index.New([]index.Spec{{Type: "services", IndexBy: []string{"spec.port"}}})
	if err != nil {
		g.t.Fatal(err)
	}
	return &follower{ix: ix, bucket: g.stream, log: slog.New(slog.DiscardHandler)}
}

// write puts (port > 0), deletes (port 0) or purges (port < 0) key and
// returns the change the relay would announce for the write.
func (g *followRig) write(key string, port int) msg.Change {
	g.t.Helper()
	ctx := context.Background()
	_, _, ns, name, err := msg.ParseResourceKey(key)
	if err != nil {
		g.t.Fatal(err)
	}
	c := msg.Change{Source: "s", Type: "services", Key: key, Namespace: ns, Name: name, Op: msg.OpDelete}
	switch {
	case port > 0:
		obj := map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"port": port}}
		data, err := msg.Encode(msg.Resource{Source: "s", Type: "services", Namespace: ns, Name: name, Hash: fmt.Sprint(port), Object: obj})
		if err != nil {
			g.t.Fatal(err)
		}
		if c.Revision, err = g.kv.Put(ctx, key, data); err != nil {
			g.t.Fatal(err)
		}
		c.Op = msg.OpPut
		return c
	case port == 0:
		err = g.kv.Delete(ctx, key)
	default:
		err = g.kv.Purge(ctx, key)
	}
	if err != nil {
		g.t.Fatal(err)
	}
	// The marker is the key's last write.
	m, err := g.stream.GetLastMsgForSubject(ctx, msg.ResourceSubject(key))
	if err != nil {
		g.t.Fatal(err)
	}
	c.Revision = m.Sequence
	return c
}

// equalBucket fails unless the follower's index holds exactly the live
// values of keys in the bucket, each at its bucket revision.
func (g *followRig) equalBucket(f *follower, keys []string, what string) {
	g.t.Helper()
	ctx := context.Background()
	st := f.ix.Store("services")
	live := 0
	for _, key := range keys {
		e, err := g.kv.Get(ctx, key)
		it, held := st.Item(key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if held {
				g.t.Fatalf("%s: %s is deleted in the bucket, the index holds it at revision %d", what, key, it.Rev)
			}
			continue
		case err != nil:
			g.t.Fatal(err)
		}
		live++
		var res msg.Resource
		if err := msg.Decode(e.Value(), &res); err != nil {
			g.t.Fatal(err)
		}
		want := index.Normalize(res.Object)
		if !held {
			g.t.Fatalf("%s: %s is in the bucket at revision %d, not in the index", what, key, e.Revision())
		}
		if it.Rev != e.Revision() || !reflect.DeepEqual(it.Object(), want) {
			g.t.Fatalf("%s: %s: index has revision %d %v, bucket %d %v", what, key, it.Rev, it.Object(), e.Revision(), want)
		}
	}
	if st.Len() != live {
		g.t.Fatalf("%s: index holds %d objects, bucket %d", what, st.Len(), live)
	}
}

// TestFollowerDeleteThenRecreate: a delete and a re-create that is the
// very next write of the bucket (its revision is the delete marker's plus
// one) must leave the object in the index.
func TestFollowerDeleteThenRecreate(t *testing.T) {
	g := newFollowRig(t)
	f := g.follower()
	ctx := context.Background()
	key := msg.ResourceKey("s", "services", "default", "web")
	for _, c := range []msg.Change{g.write(key, 80), g.write(key, 0)} {
		if _, err := f.applyChange(ctx, c, 0); err != nil {
			t.Fatal(err)
		}
	}
	g.equalBucket(f, []string{key}, "after delete")
	c := g.write(key, 81)
	changed, err := f.applyChange(ctx, c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !changed {
		t.Fatalf("re-create at revision %d ignored", c.Revision)
	}
	g.equalBucket(f, []string{key}, "after re-create")
}

// TestFollowerMatchesBucket is a property test: random creates, updates,
// deletes, purges and re-creates of a few keys, their changes delivered
// late, twice, out of order and again long after (as redelivery after a
// nak or a lost ack does), always leave the index equal to the bucket.
func TestFollowerMatchesBucket(t *testing.T) {
	g := newFollowRig(t)
	ctx := context.Background()
	iterations := 150
	if testing.Short() {
		iterations = 20
	}
	for seed := range uint64(iterations) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		f := g.follower()
		keys := make([]string, 3)
		for i := range keys {
			keys[i] = msg.ResourceKey("s", "services", fmt.Sprintf("ns%d", seed), fmt.Sprintf("k%d", i))
		}
		var pending, announced []msg.Change
		deliver := func() {
			i := rng.IntN(len(pending))
			c := pending[i]
			for range 1 + rng.IntN(2) { // sometimes twice in a row
				if _, err := f.applyChange(ctx, c, 0); err != nil {
					t.Fatalf("seed %d: %s@%d: %v", seed, c.Key, c.Revision, err)
				}
			}
			if rng.IntN(4) > 0 { // else: not acknowledged, delivered again later
				pending = append(pending[:i], pending[i+1:]...)
			}
		}
		for range 40 {
			key := keys[rng.IntN(len(keys))]
			var c msg.Change
			switch r := rng.IntN(10); {
			case r < 6:
				c = g.write(key, 1+rng.IntN(3)) // create, update or re-create; ports repeat
			case r < 9:
				c = g.write(key, 0)
			default:
				c = g.write(key, -1)
			}
			pending = append(pending, c)
			announced = append(announced, c)
			for n := rng.IntN(len(pending) + 1); n > 0 && len(pending) > 0; n-- {
				deliver()
			}
			if rng.IntN(5) == 0 { // an old change delivered again
				pending = append(pending, announced[rng.IntN(len(announced))])
			}
		}
		for len(pending) > 0 {
			deliver()
		}
		g.equalBucket(f, keys, fmt.Sprintf("seed %d", seed))
	}
}

// TestFollowerChangeAhead: a change naming a revision its key never had
// in the bucket (a forged message) changes nothing and is retried, then
// dead-lettered once it is older than msg.ConfirmWait; it records no
// tombstone that would hide a later real write.
func TestFollowerChangeAhead(t *testing.T) {
	g := newFollowRig(t)
	f := g.follower()
	ctx := context.Background()
	web := msg.ResourceKey("s", "services", "default", "web")
	ghost := msg.ResourceKey("s", "services", "default", "ghost")
	if _, err := f.applyChange(ctx, g.write(web, 80), 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []msg.Change{
		{Source: "s", Type: "services", Key: web, Name: "web", Op: msg.OpDelete, Revision: 99999},
		{Source: "s", Type: "services", Key: ghost, Name: "ghost", Op: msg.OpDelete, Revision: 99999},
	} {
		changed, err := f.applyChange(ctx, c, time.Second)
		if !errors.Is(err, msg.ErrUnconfirmed) || msg.IsPermanent(err) || changed {
			t.Fatalf("%s: young forged change: changed=%v err=%v", c.Key, changed, err)
		}
		_, err = f.applyChange(ctx, c, msg.ConfirmWait+time.Second)
		if !errors.Is(err, msg.ErrUnconfirmed) || !msg.IsPermanent(err) {
			t.Fatalf("%s: old forged change: err=%v, want permanent", c.Key, err)
		}
	}
	c := g.write(ghost, 81)
	if changed, err := f.applyChange(ctx, c, 0); err != nil || !changed {
		t.Fatalf("real write after a forged change: changed=%v err=%v", changed, err)
	}
	g.equalBucket(f, []string{web, ghost}, "after forged changes")
}
