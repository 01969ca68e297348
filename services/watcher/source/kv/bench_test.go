package kv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

// benchKeys is how many values each benchmark reads.
const benchKeys = 10_000

// benchSink counts the first listing and signals its sync.
type benchSink struct {
	n      int
	synced chan struct{}
}

func (s *benchSink) Replace(_ context.Context, _ string, objs []store.Object) error {
	s.n = len(objs)
	return nil
}
func (s *benchSink) Upsert(context.Context, store.Object) error           { return nil }
func (s *benchSink) Delete(context.Context, string, string, string) error { return nil }
func (s *benchSink) Problem(context.Context, error)                       {}
func (s *benchSink) Synced(context.Context, string, []string) error {
	close(s.synced)
	return nil
}

// benchInitialRead measures building the source and running it until its
// first complete read of benchKeys values is synced.
func benchInitialRead(b *testing.B, src config.Source, opts ...Option) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		s, err := New(src, opts...)
		if err != nil {
			b.Fatal(err)
		}
		sink := &benchSink{synced: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func(s source.Source) { done <- s.Run(ctx, sink) }(s)
		select {
		case <-sink.synced:
		case <-time.After(60 * time.Second):
			b.Fatal("not synced within 60s")
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if sink.n != benchKeys {
			b.Fatalf("read %d values, want %d", sink.n, benchKeys)
		}
	}
}

func BenchmarkInitialReadNATSKV(b *testing.B) {
	bus := testkit.NATS(b)
	kv := newBucket(b, bus.JS, "bench")
	ctx := context.Background()
	for i := range benchKeys {
		if _, err := kv.PutString(ctx, fmt.Sprintf("app.group%03d.key%03d", i/100, i%100), "value"); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := kv.PutString(ctx, "other.key", "not read"); err != nil {
		b.Fatal(err)
	}
	benchInitialRead(b, config.Source{Type: config.SourceNATSKV, Bucket: "bench", Prefix: "/app"}, WithNATSConn(bus.NC))
}

func BenchmarkInitialReadEnv(b *testing.B) {
	vars := make([]string, 0, benchKeys+100)
	for i := range benchKeys {
		vars = append(vars, fmt.Sprintf("APP_GROUP%03d_KEY%03d=value", i/100, i%100))
	}
	for i := range 100 {
		vars = append(vars, fmt.Sprintf("OTHER_%d=not read", i))
	}
	benchInitialRead(b, config.Source{Type: config.SourceEnv, Prefix: "/app"}, WithEnviron(func() []string { return vars }))
}

func BenchmarkInitialReadFile(b *testing.B) {
	var y strings.Builder
	y.WriteString("app:\n")
	for g := range benchKeys / 100 {
		fmt.Fprintf(&y, "  group%03d:\n", g)
		for k := range 100 {
			fmt.Fprintf(&y, "    key%03d: value\n", k)
		}
	}
	y.WriteString("other: not read\n")
	p := filepath.Join(b.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(y.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	benchInitialRead(b, config.Source{Type: config.SourceFile, Path: p, Prefix: "/app"})
}

func BenchmarkInitialReadEtcd(b *testing.B) {
	srv := startEtcd(b)
	data := make(map[string]string, benchKeys+1)
	for i := range benchKeys {
		data[fmt.Sprintf("/app/group%03d/key%03d", i/100, i%100)] = "value"
	}
	data["/other/key"] = "not read"
	putMany(b, srv.client, data)
	benchInitialRead(b, config.Source{Type: config.SourceEtcd, Endpoints: []string{srv.url}, Prefix: "/app"})
}

func BenchmarkInitialReadRedis(b *testing.B) {
	srv := startRedis(b)
	ctx := context.Background()
	pipe := srv.client.Pipeline()
	// 9,000 strings and 100 hashes of 10 fields.
	for i := range benchKeys - 1000 {
		pipe.Set(ctx, fmt.Sprintf("/app/group%03d/key%03d", i/100, i%100), "value", 0)
	}
	for h := range 100 {
		fields := make([]any, 0, 20)
		for f := range 10 {
			fields = append(fields, fmt.Sprintf("f%d", f), "value")
		}
		pipe.HSet(ctx, fmt.Sprintf("/app/hash%03d", h), fields...)
	}
	pipe.Set(ctx, "/other/key", "not read", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	benchInitialRead(b, config.Source{Type: config.SourceRedis, Address: srv.addr, Prefix: "/app"})
}
