package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/testkit"
)

// BenchmarkLibraryBundleStore renders the library at n Ingresses and, per
// op, changes one endpoint, renders again and stores the new bundle two
// ways in the same run, each on its own embedded JetStream: by content
// (msg.BundleStore: chunks stored once) and whole (the bundle's JSON as
// one object, as weft stored bundles before). It reports the bytes each
// adds to its store's stream per change (stream State.Bytes), their ratio,
// and put and load time per bundle (a load by a long-lived reader, as the
// validator and deployer read: its chunk cache warm with the bundle
// before). Rendering is not timed.
func BenchmarkLibraryBundleStore(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ctx := context.Background()
			tg, err := target.Compile("bench", LibraryTarget())
			if err != nil {
				b.Fatal(err)
			}
			oc := newLibraryOneChange(b, n, tg.Invalidate)
			render := func() msg.Bundle {
				res, err := tg.Render(ctx, oc.ix.Stores(), nil)
				if err != nil {
					b.Fatal(err)
				}
				return res.Bundle
			}
			chunked, whole := testkit.NATS(b), testkit.NATS(b)
			writer, reader := msg.NewBundleStore(chunked.JS), msg.NewBundleStore(chunked.JS)
			obs, err := whole.JS.ObjectStore(ctx, msg.ObjectBundles)
			if err != nil {
				b.Fatal(err)
			}
			var putNew, getNew, putOld, getOld time.Duration
			store := func(bd msg.Bundle, timed bool) {
				start := time.Now()
				if err := writer.PutBundle(ctx, "", bd); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				got, err := reader.LoadBundle(ctx, bd.Hash)
				if err != nil || got.Hash != bd.Hash {
					b.Fatalf("load: %v", err)
				}
				end := time.Now()
				data, err := msg.EncodeBundle(bd)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := obs.PutBytes(ctx, bd.Hash, data); err != nil {
					b.Fatal(err)
				}
				mid2 := time.Now()
				back, err := obs.GetBytes(ctx, bd.Hash)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := msg.DecodeBundle(back); err != nil {
					b.Fatal(err)
				}
				if timed {
					putNew += mid.Sub(start)
					getNew += end.Sub(mid)
					putOld += mid2.Sub(end)
					getOld += time.Since(mid2)
				}
			}
			first := render()
			store(first, false)
			size := 0
			for _, f := range first.Files {
				size += len(f.Content)
			}
			newBefore, oldBefore := streamBytes(b, chunked.JS), streamBytes(b, whole.JS)
			for b.Loop() {
				b.StopTimer()
				oc.step()
				bd := render()
				b.StartTimer()
				store(bd, true)
			}
			perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(b.N) }
			newB := float64(streamBytes(b, chunked.JS)-newBefore) / float64(b.N)
			oldB := float64(streamBytes(b, whole.JS)-oldBefore) / float64(b.N)
			b.ReportMetric(float64(size)/(1<<20), "bundle-MB")
			b.ReportMetric(newB, "chunked-B/change")
			b.ReportMetric(oldB, "whole-B/change")
			b.ReportMetric(oldB/max(newB, 1), "x-smaller")
			b.ReportMetric(perOp(putNew), "chunked-put-ms")
			b.ReportMetric(perOp(putOld), "whole-put-ms")
			b.ReportMetric(perOp(getNew), "chunked-load-ms")
			b.ReportMetric(perOp(getOld), "whole-load-ms")
		})
	}
}

func streamBytes(tb testing.TB, js jetstream.JetStream) uint64 {
	tb.Helper()
	s, err := js.Stream(context.Background(), msg.ObjectStream(msg.ObjectBundles))
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Bytes
}
