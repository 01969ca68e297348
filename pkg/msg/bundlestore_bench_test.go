package msg_test

import (
	"context"
	"testing"
	"time"
)

// BenchmarkBundleStorePutLoad stores and loads, per op, a ~3.4 MB bundle
// that differs from the one before by one line, through one writer and one
// long-lived reader: the put and load time of the bundle store alone.
func BenchmarkBundleStorePutLoad(b *testing.B) {
	js := provisioned(b)
	ctx := context.Background()
	w, r := newStores(js)
	// The first bundle: every chunk written, then read.
	first := storedBundle(b, "web", 22000, 0)
	if err := w.PutBundle(ctx, "", first); err != nil {
		b.Fatal(err)
	}
	if _, err := r.LoadBundle(ctx, first.Hash); err != nil {
		b.Fatal(err)
	}
	i := 0
	var put, load time.Duration
	for b.Loop() {
		b.StopTimer()
		i++
		bd := storedBundle(b, "web", 22000, i)
		b.StartTimer()
		start := time.Now()
		if err := w.PutBundle(ctx, "", bd); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if _, err := r.LoadBundle(ctx, bd.Hash); err != nil {
			b.Fatal(err)
		}
		put += mid.Sub(start)
		load += time.Since(mid)
	}
	b.ReportMetric(float64(put.Microseconds())/1e3/float64(b.N), "put-ms")
	b.ReportMetric(float64(load.Microseconds())/1e3/float64(b.N), "load-ms")
}
