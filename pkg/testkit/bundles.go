package testkit

import (
	"fmt"
	"strings"

	"github.com/weftio/weft/pkg/msg"
)

// HAProxyBundle is a valid HAProxy bundle based at /etc/haproxy with n backends, three map files that
// route to them, and error files, all referenced through absolute base paths.
func HAProxyBundle(n int) []msg.BundleFile {
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
	for i := range n {
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
	return []msg.BundleFile{
		{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte(cfg.String())},
		{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte(hosts.String())},
		{Path: "maps/path-exact.map", Kind: msg.FileMap, Content: []byte(exact.String())},
		{Path: "maps/path-prefix.map", Kind: msg.FileMap, Content: []byte(prefix.String())},
		{Path: "files/400.http", Kind: msg.FileFile, Content: errFile(400, "Bad request")},
		{Path: "files/503.http", Kind: msg.FileFile, Content: errFile(503, "Service Unavailable")},
	}
}
