package watcher_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
)

// BenchmarkWatcherProcess runs weft-watcher as its own process (NATS in the
// test process) over 10,000 applications (and 10, the baseline): 30,000 objects, a third each
// Ingresses, Services and EndpointSlices, from a folder of manifests and
// from a real API server. Once every object is announced it reports the
// process's resident memory (MB-rss, VmRSS), its peak (MB-rss-peak, VmHWM)
// and the CPU time it used (s-cpu, from /proc); then, once every type's
// sync status is written and a second has passed (the sink hands the first
// listing's memory back to the system once all are synced), the resident
// memory held (MB-rss-held) and its anonymous part (MB-anon-held: heap and
// stacks, without the binary's mapped code).
func BenchmarkWatcherProcess(b *testing.B) {
	bin := testkit.GoBuild(b, "github.com/weftio/weft/services/watcher/cmd/weft-watcher")
	const apps = 10_000
	manifests := func(apps int) func(b *testing.B) {
		return func(b *testing.B) {
			dir := b.TempDir()
			folder := filepath.Join(dir, "manifests")
			if err := os.Mkdir(folder, 0o755); err != nil {
				b.Fatal(err)
			}
			writeApps(b, folder, apps, 100, func(int) string { return "10.0.0.1" })
			cfg := filepath.Join(dir, "weft.yaml")
			if err := os.WriteFile(cfg, []byte(manifestsCfg), 0o644); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				runProcess(b, bin, cfg, "m", 3*apps)
			}
		}
	}
	// The process at next to no objects: what it holds at any size (the
	// runtime, the binary's code and data mapped from its file).
	b.Run("manifests-30", manifests(10))
	b.Run("manifests-30k", manifests(apps))
	kube := func(apps int) func(b *testing.B) {
		return func(b *testing.B) {
			k := kubetest.Start(b)
			createMix(b, k.Clientset, "proc", 3*apps)
			cfg := filepath.Join(b.TempDir(), "weft.yaml")
			if err := os.WriteFile(cfg, fmt.Appendf(nil, kubeCfg, k.Kubeconfig), 0o644); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				runProcess(b, bin, cfg, "k", 3*apps)
			}
		}
	}
	b.Run("kube-30k", kube(apps))
	// 100,000 objects take the API server minutes to create: on request.
	b.Run("kube-100k", func(b *testing.B) {
		if os.Getenv("WEFT_BENCH_KUBE_100K") == "" {
			b.Skip("set WEFT_BENCH_KUBE_100K=1 to run it (creating 100,002 objects takes minutes)")
		}
		kube(33_334)(b)
	})
}

// runProcess runs the watcher binary on cfg (one source of the three
// types) until objects changes are announced and reports its memory and
// CPU time.
func runProcess(b *testing.B, bin, cfg, source string, objects int) {
	b.Helper()
	bus := testkit.NATS(b)
	addr := testkit.FreeAddr(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config", cfg, "--nats-url", bus.URL, "--listen", addr, "--watch-config=false", "--log-level", "warn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
		if b.Failed() {
			b.Log(stderr.String())
		}
	}()
	start := time.Now()
	waitChanges(b, bus, msg.ChangeAll, uint64(objects))
	b.ReportMetric(time.Since(start).Seconds(), "s-to-announced")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(procKB(b, status, "VmRSS:")/1e3, "MB-rss")
	b.ReportMetric(procKB(b, status, "VmHWM:")/1e3, "MB-rss-peak")
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name: utime and stime are the 12th and 13th.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	b.ReportMetric((ut+st)/100, "s-cpu") // clock ticks of 1/100 s

	syncs, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		b.Fatal(err)
	}
	testkit.Eventually(b, 5*time.Minute, func() error {
		for _, typ := range []string{"ingresses", "services", "endpoints"} {
			e, err := syncs.Get(ctx, msg.SyncStatusKey(source, typ))
			if err != nil {
				return fmt.Errorf("sync status of %s: %w", typ, err)
			}
			var st msg.SyncStatus
			if err := msg.Decode(e.Value(), &st); err != nil || !st.Synced {
				return fmt.Errorf("%s not synced (%v)", typ, err)
			}
		}
		return nil
	})
	time.Sleep(time.Second)
	if status, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(procKB(b, status, "VmRSS:")/1e3, "MB-rss-held")
	b.ReportMetric(procKB(b, status, "RssAnon:")/1e3, "MB-anon-held")
}

// procKB reads a "Name:   123 kB" line of /proc/<pid>/status.
func procKB(b *testing.B, status []byte, name string) float64 {
	b.Helper()
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, name); ok {
			v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return v
		}
	}
	b.Fatalf("no %s in /proc status", name)
	return 0
}
