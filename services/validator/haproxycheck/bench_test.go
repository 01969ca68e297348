package haproxycheck

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

const benchBackends = 200

// benchBundle is a bundle with benchBackends backends, three map files that
// route to them, and error files, all referenced through absolute base paths.
func benchBundle() []File {
	var cfg, hosts, exact, prefix strings.Builder
	cfg.WriteString(`global
  log stdout format raw local0

defaults
  mode http
  log global
  option httplog
  timeout connect 5s
  timeout client 50s
  timeout server 50s
  errorfile 400 /etc/haproxy/files/400.http
  errorfile 503 /etc/haproxy/files/503.http

frontend http_frontend
  bind 127.0.0.1:8080
  http-request set-var(txn.path) path
  http-request set-var(txn.host) req.hdr(Host),field(1,:),lower
  http-request set-var(txn.host_match) var(txn.host),map(/etc/haproxy/maps/host.map)
  http-request set-var(txn.path_match) var(txn.host_match),concat(,txn.path,),map(/etc/haproxy/maps/path-exact.map)
  http-request set-var(txn.path_match) var(txn.host_match),concat(,txn.path,),map_beg(/etc/haproxy/maps/path-prefix.map) if !{ var(txn.path_match) -m found }
  use_backend %[var(txn.path_match)]
  default_backend be_default

backend be_default
  http-request return status 404
`)
	for i := range benchBackends {
		host := fmt.Sprintf("app%03d.example.com", i)
		name := fmt.Sprintf("be_ns%d_app%03d", i%7, i)
		fmt.Fprintf(&hosts, "%s %s\n", host, host)
		fmt.Fprintf(&exact, "%s/healthz %s\n", host, name)
		fmt.Fprintf(&prefix, "%s/ %s\n%s/api %s\n", host, name, host, name)
		fmt.Fprintf(&cfg, "\nbackend %s\n  balance roundrobin\n  option httpchk GET /healthz\n", name)
		for s := range 4 {
			fmt.Fprintf(&cfg, "  server s%d 10.%d.%d.%d:8080 check weight 100\n", s, i/250, i%250, s+1)
		}
	}
	errFile := func(code int, text string) []byte {
		return fmt.Appendf(nil, "HTTP/1.0 %d %s\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: text/html\r\n\r\n<html><body><h1>%d %s</h1></body></html>\n", code, text, code, text)
	}
	return []File{
		{Path: "haproxy.cfg", Content: []byte(cfg.String())},
		{Path: "maps/host.map", Content: []byte(hosts.String())},
		{Path: "maps/path-exact.map", Content: []byte(exact.String())},
		{Path: "maps/path-prefix.map", Content: []byte(prefix.String())},
		{Path: "files/400.http", Content: errFile(400, "Bad request")},
		{Path: "files/503.http", Content: errFile(503, "Service Unavailable")},
	}
}

// BenchmarkCheck is the package's full cost: validate, lay out, rewrite, run
// haproxy -c, parse and clean up. Compare with BenchmarkBareHaproxyC.
func BenchmarkCheck(b *testing.B) {
	c, root := newTestChecker(b)
	files := benchBundle()
	if problems, err := c.Check(context.Background(), files, testMain, testBase); err != nil || problems != nil {
		b.Fatalf("bench bundle must be valid: %v%s", err, dump(problems))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Check(context.Background(), files, testMain, testBase); err != nil {
			b.Fatal(err)
		}
	}
	assertNoTempDirs(b, root)
}

// BenchmarkBareHaproxyC runs plain haproxy -c -f on the same bundle, laid out
// on disk once beforehand.
func BenchmarkBareHaproxyC(b *testing.B) {
	c, _ := newTestChecker(b)
	bnd, err := prepare(benchBundle(), testMain, testBase)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := bnd.layout(dir); err != nil {
		b.Fatal(err)
	}
	run := func() {
		cmd := exec.Command(c.Binary(), "-c", "-f", dir+"/"+testMain)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("haproxy -c: %v\n%s", err, out)
		}
	}
	run()
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
}
