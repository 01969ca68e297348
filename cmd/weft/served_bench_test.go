package main

import (
	"context"
	"fmt"
	"github.com/weftio/weft/pkg/testkit"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/services/deployer/driver/runtime"
)

// servedStack is the quickstart delivered to a real HAProxy by the runtime
// driver, with echo backends, serving.
type servedStack struct {
	*stack
	port int
	drv  *runtime.Driver
}

func startServed(b *testing.B) servedStack {
	httpPort, backendPort := testkit.FreePort(b), testkit.FreePort(b)
	for _, e := range []struct{ addr, name string }{{"127.0.0.1", "web-1"}, {"127.0.0.2", "web-2"}, {"127.0.0.9", "web-9"}, {"127.0.0.3", "api-1"}, {"127.0.0.5", "blog-1"}} {
		echo(b, net.JoinHostPort(e.addr, strconv.Itoa(backendPort)), e.name)
	}
	s := startStackWith(b, quickstart, func(d string) { onPorts(b, d, httpPort, backendPort) }, nil, func(d string) { runtimeQuickstart(b, d) })
	drv, err := runtime.New(runtime.Options{Dir: filepath.Join(s.dir, "out"), MasterSocket: filepath.Join(s.dir, "master.sock"), AdminSocket: filepath.Join(s.dir, "admin.sock")})
	if err != nil {
		b.Fatal(err)
	}
	ss := servedStack{stack: s, port: httpPort, drv: drv}
	ss.until(b, "shop.example.com", "200 web-")
	return ss
}

// until polls host until an answer starts with want, and returns when.
func (s servedStack) until(b *testing.B, host, want string) time.Time {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if strings.HasPrefix(httpGet(s.port, host, "/"), want) {
			return time.Now()
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("%s never answered %q", host, want)
	return time.Time{}
}

func (s servedStack) reloads(b *testing.B) int {
	n, err := s.drv.Reloads(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// report adds p50-ms, p99-ms (the largest sample when there are fewer
// than 100) and reloads/op.
func report(b *testing.B, lat []time.Duration, reloads int) {
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
	b.ReportMetric(float64(reloads)/float64(len(lat)), "reloads/op")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkManifestToServed measures the time from writing a manifest to
// HAProxy serving the change, through the whole pipeline (manifest source,
// watcher, renderer with its debounce, validator with haproxy -c, deployer
// with the runtime driver): an EndpointSlice address change, and a new
// host on an existing Service. Latencies are wall time per change.
func BenchmarkManifestToServed(b *testing.B) {
	b.Run("endpoint-change", func(b *testing.B) {
		s := startServed(b)
		before := s.reloads(b)
		var lat []time.Duration
		addr, name := [2]string{`"127.0.0.2"`, `"127.0.0.9"`}, [2]string{"web-2", "web-9"}
		i := 0
		for b.Loop() {
			start := time.Now()
			s.editManifest("endpoints.yaml", addr[i%2], addr[(i+1)%2])
			s.untilOnly(b, name[(i+1)%2], name[i%2])
			lat = append(lat, time.Since(start))
			i++
		}
		report(b, lat, s.reloads(b)-before)
	})
	b.Run("new-host", func(b *testing.B) {
		s := startServed(b)
		before := s.reloads(b)
		var lat []time.Duration
		i := 0
		for b.Loop() {
			host := fmt.Sprintf("new%d.example.com", i)
			start := time.Now()
			s.editManifest("shop.yaml", "    - host: checkout.example.com\n", "    - host: "+host+"\n      http:\n        paths:\n          - path: /\n            pathType: Prefix\n            backend:\n              service:\n                name: web\n                port:\n                  number: 80\n    - host: checkout.example.com\n")
			lat = append(lat, s.until(b, host, "200 web-").Sub(start))
			i++
		}
		report(b, lat, s.reloads(b)-before)
	})
}

// untilOnly polls shop.example.com until the backend named now answers,
// after which the one named gone must not.
func (s servedStack) untilOnly(b *testing.B, now, gone string) {
	s.until(b, "shop.example.com", "200 "+now)
	for range 4 {
		if got := httpGet(s.port, "shop.example.com", "/"); got == "200 "+gone {
			b.Fatalf("%s still answers after %s did", gone, now)
		}
	}
}

// BenchmarkReloadsPer1000EndpointChanges writes 1,000 EndpointSlice
// address changes one after another (a few milliseconds apart), waits until
// the last is served, and reports the HAProxy reloads they cost.
func BenchmarkReloadsPer1000EndpointChanges(b *testing.B) {
	s := startServed(b)
	for b.Loop() {
		before := s.reloads(b)
		addr := [2]string{`"127.0.0.2"`, `"127.0.0.9"`}
		for i := range 1000 {
			s.editManifest("endpoints.yaml", addr[i%2], addr[(i+1)%2])
			time.Sleep(3 * time.Millisecond)
		}
		// 1,000 changes end on the starting address.
		s.untilOnly(b, "web-2", "web-9")
		b.ReportMetric(float64(s.reloads(b)-before), "reloads/1000-changes")
	}
	b.ReportMetric(0, "ns/op")
}
