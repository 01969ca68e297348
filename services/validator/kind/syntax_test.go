package kind_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator/haproxycheck"
	"github.com/weftio/weft/services/validator/kind"
)

// fixtureBase is the folder the fixture bundles refer to their files under.
const fixtureBase = "/etc/haproxy"

// loadFixture reads testdata/<dir> as a bundle whose main file is
// haproxy.cfg, with the kind of each file taken from its folder.
func loadFixture(t testing.TB, dir string) msg.Bundle {
	t.Helper()
	root := filepath.Join("testdata", dir)
	var files []msg.BundleFile
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		content, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		k := msg.FileFile
		switch {
		case rel == "haproxy.cfg":
			k = msg.FileConfig
		case strings.HasPrefix(rel, "maps/"):
			k = msg.FileMap
		case strings.HasPrefix(rel, "certs/"):
			k = msg.FileCert
		}
		files = append(files, msg.BundleFile{Path: rel, Kind: k, Content: content})
		return nil
	})
	if err != nil {
		t.Fatalf("loading %s: %v", dir, err)
	}
	b, err := msg.NewBundle("t", fixtureBase, "haproxy.cfg", files)
	if err != nil {
		t.Fatalf("bundle %s: %v", dir, err)
	}
	return b
}

// bundleOf makes a bundle of one main configuration.
func bundleOf(t testing.TB, cfg string) msg.Bundle {
	t.Helper()
	b, err := msg.NewBundle("t", fixtureBase, "haproxy.cfg", []msg.BundleFile{{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte(cfg)}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// want is an expected problem: its line, severity and a part of its message.
type want struct {
	line     int
	severity string
	contains string
}

func matchProblems(t *testing.T, got []msg.Problem, wants []want) {
	t.Helper()
	ok := len(got) == len(wants)
	for i := 0; ok && i < len(got); i++ {
		p, w := got[i], wants[i]
		ok = p.File == "haproxy.cfg" && p.Line == w.line && p.Severity == w.severity && strings.Contains(p.Message, w.contains)
	}
	if !ok {
		var b strings.Builder
		for _, p := range got {
			fmt.Fprintf(&b, "\n\t%s:%d %s: %s", p.File, p.Line, p.Severity, p.Message)
		}
		t.Fatalf("problems:%s\nwant %+v", b.String(), wants)
	}
}

func TestSyntaxCheckerFixtures(t *testing.T) {
	cases := []struct {
		dir  string
		want []want
		// haproxyRejects is what `haproxy -c` (2.6) says of the fixture,
		// checked when haproxy is installed.
		haproxyRejects bool
	}{
		{dir: "valid"},
		{dir: "unknown-keyword", haproxyRejects: true, want: []want{
			{10, "error", `unknown keyword "retry-on-everything" in defaults section`},
			{17, "error", `unknown keyword "frobnicate" in backend section`},
		}},
		{dir: "unknown-backend", haproxyRejects: true, want: []want{
			{14, "error", `use_backend refers to backend "be_missing", which is not defined`},
			{17, "error", `default_backend refers to backend "be_gone", which is not defined`},
		}},
		{dir: "missing-map", haproxyRejects: true, want: []want{
			{12, "error", "errorfile /etc/haproxy/files/503.http is below the bundle's base /etc/haproxy, but the bundle has no files/503.http"},
			{17, "error", "crt /etc/haproxy/certs/missing.pem"},
			{19, "error", "map() /etc/haproxy/maps/path-exact.map"},
			{20, "error", "map_beg() /etc/haproxy/maps/path-prefix.map"},
			{21, "error", "pattern file /etc/haproxy/files/deny.lst"},
		}},
		{dir: "duplicate-backend", haproxyRejects: true, want: []want{
			{17, "error", `invalid arguments for "server": "server s1"`},
			{20, "error", `backend "be" has the same name as the backend declared at line 16`},
		}},
		{dir: "bad-arguments", haproxyRejects: true, want: []want{
			{7, "error", `invalid arguments for "mode": "mode nonsense"`},
			{8, "error", `invalid arguments for "timeout connect"`},
			{14, "warning", `"balance" is not valid in a frontend section (only in defaults, backend, listen)`},
			{15, "error", `invalid arguments for "http-request": "http-request bogus-action"`},
			{20, "error", `invalid arguments for "server": "server s1"`},
			{21, "error", `invalid arguments for "server"`},
		}},
		{dir: "structure", haproxyRejects: true, want: []want{
			{2, "error", `"maxconn" is outside any section`},
			{14, "error", "65 words on one line: HAProxy reads at most 64"},
			{15, "error", "unterminated quote"},
			{18, "error", `backend "be" is based on defaults section "nowhere", which is not declared before it`},
			{20, "error", `backend "be": server "s1" is already defined at line 19`},
			{22, "error", "backend section without a name"},
			{25, "error", `backend name "d/e" has a character HAProxy does not permit`},
		}},
	}
	hc, hcErr := haproxycheck.New()
	for _, tc := range cases {
		t.Run(tc.dir, func(t *testing.T) {
			b := loadFixture(t, "syntax/"+tc.dir)
			got, err := kind.SyntaxChecker{}.Check(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			matchProblems(t, got, tc.want)
			if kind.Failed(got) != tc.haproxyRejects {
				t.Errorf("syntax kind failed=%v, haproxy rejects=%v", kind.Failed(got), tc.haproxyRejects)
			}
			if !testkit.Want(t, "haproxy (apt-get install haproxy), which cross-checks the syntax kind", hcErr) {
				return
			}
			files := make([]haproxycheck.File, len(b.Files))
			for i, f := range b.Files {
				files[i] = haproxycheck.File{Path: f.Path, Content: f.Content}
			}
			hp, err := hc.Check(context.Background(), files, b.Main, b.Base)
			if err != nil && !errors.Is(err, haproxycheck.ErrInvalid) {
				t.Fatalf("haproxy -c: %v", err)
			}
			if rejected := err != nil; rejected != tc.haproxyRejects {
				t.Errorf("haproxy rejects=%v, want %v: %v", rejected, tc.haproxyRejects, hp)
			}
		})
	}
}

func TestSyntaxCheckerInline(t *testing.T) {
	const head = "global\n  log stdout format raw local0\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 5s\n  timeout server 5s\n"
	cases := []struct {
		name string
		cfg  string
		want []want
	}{
		{
			name: "line too long for the parser; the rest is still read",
			cfg:  head + "backend a\n  acl x path " + strings.Repeat("a", 70000) + "\nbackend b\n  frobnicate\n",
			want: []want{{9, "error", "longer than 65535 bytes"}, {11, "error", `unknown keyword "frobnicate" in backend section`}},
		},
		{
			name: "listen sections are parsed as such",
			cfg:  head + "listen l\n  bind 127.0.0.1:80\n  mode tcp\n  server s 127.0.0.1:81\n  frobnicate\n",
			want: []want{{12, "error", `unknown keyword "frobnicate" in listen section`}},
		},
		{
			name: "a listen section conflicts with a backend; a frontend does not",
			cfg:  head + "frontend x\n  bind 127.0.0.1:80\n  default_backend x\nbackend x\n  server s 127.0.0.1:81\nlisten x\n  bind 127.0.0.1:82\n",
			want: []want{{13, "error", `listen "x" has the same name as the frontend declared at line 8`}},
		},
		{
			name: "duplicate userlists are a warning, duplicate defaults are fine",
			cfg:  head + "defaults d\n  mode http\ndefaults d\n  mode tcp\nuserlist u\n  user a insecure-password a\nuserlist u\n  user b insecure-password b\n",
			want: []want{{14, "warning", `userlist "u" has the same name as the userlist declared at line 12`}},
		},
		{
			name: "global sections merge and are checked in order",
			cfg:  "global\n  daemon\n  frobnicate 1\ndefaults\n  mode http\nglobal\n  maxconn abc\n  frobnicate 1\n",
			want: []want{{3, "error", `unknown keyword "frobnicate" in global section`}, {7, "error", `invalid arguments for "maxconn"`}, {8, "error", `unknown keyword "frobnicate"`}},
		},
		{
			name: "lines after a program section are still mapped",
			cfg:  "global\n  daemon\nprogram p\n  command /bin/true\nglobal\n  frobnicate 1\n",
			want: []want{{6, "error", `unknown keyword "frobnicate" in global section`}},
		},
		{
			name: "a quote in a section name: the section is not opened",
			cfg:  head + "backend \"b\"\n  server s 127.0.0.1:81\n",
			want: []want{{8, "error", "malformed backend section header"}, {9, "warning", `"server" is not valid in a defaults section`}},
		},
		{
			name: "comments, escapes and quotes that are closed",
			cfg:  head + "frontend f # trailing comment\n  bind 127.0.0.1:80\n  http-request set-header X-A \"a 'b' \\\"c\\\"\" # it's fine\n  http-request set-header X-B 'a \"b'\n  default_backend b\nbackend b\n  server s 127.0.0.1:81\n",
		},
		{
			name: "references outside the base or relative are not checked",
			cfg:  head + "frontend f\n  bind 127.0.0.1:80\n  http-request set-var(txn.a) path,map(/usr/share/x.map)\n  http-request set-var(txn.b) path,map_str(maps/rel.map)\n  errorfile 503 /etc/haproxy-other/503.http\n  default_backend b\nbackend b\n  server s 127.0.0.1:81\n",
		},
		{
			name: "return file, set-map and lua-load below the base",
			cfg:  "global\n  lua-load /etc/haproxy/files/x.lua\n" + head[len("global\n"):] + "frontend f\n  bind 127.0.0.1:80\n  http-request return status 503 file /etc/haproxy/files/503.http\n  http-request set-map(/etc/haproxy/maps/m.map) %[src] 1\n  default_backend b\nbackend b\n  server s 127.0.0.1:81\n",
			want: []want{
				{2, "error", "lua-load /etc/haproxy/files/x.lua"},
				{11, "error", "file /etc/haproxy/files/503.http"},
				{12, "error", "set-map() /etc/haproxy/maps/m.map"},
			},
		},
		{
			name: "a crt folder exists when the bundle has files in it",
			cfg:  head + "frontend f\n  bind 127.0.0.1:443 ssl crt /etc/haproxy/certs/\n  bind 127.0.0.1:444 ssl crt /etc/haproxy/other/\n  default_backend b\nbackend b\n  server s 127.0.0.1:81\n",
			want: []want{{10, "error", "crt /etc/haproxy/other"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := bundleOf(t, tc.cfg)
			if strings.Contains(tc.name, "crt folder") {
				files := append(b.Files, msg.BundleFile{Path: "certs/a.pem", Kind: msg.FileCert, Content: []byte("x")})
				var err error
				if b, err = msg.NewBundle("t", fixtureBase, "haproxy.cfg", files); err != nil {
					t.Fatal(err)
				}
			}
			got, err := kind.SyntaxChecker{}.Check(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			matchProblems(t, got, tc.want)
		})
	}
}

func TestSyntaxCheckerNoBase(t *testing.T) {
	b, err := msg.NewBundle("t", "", "haproxy.cfg", []msg.BundleFile{{Path: "haproxy.cfg", Kind: msg.FileConfig,
		Content: []byte("global\ndefaults\n  errorfile 503 /etc/haproxy/files/503.http\n")}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := kind.SyntaxChecker{}.Check(context.Background(), b)
	if err != nil || len(got) != 0 {
		t.Fatalf("without a base no file is checked: %v, %v", got, err)
	}
}

func TestSyntaxCheckerCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := kind.SyntaxChecker{}.Check(ctx, loadFixture(t, "syntax/valid"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := (kind.SyntaxChecker{}).Name(); n != "syntax" {
		t.Fatalf("Name() = %q", n)
	}
}

// The parser is not safe for concurrent use; the checker must be.
func TestSyntaxCheckerConcurrent(t *testing.T) {
	bundles := []msg.Bundle{loadFixture(t, "syntax/valid"), loadFixture(t, "syntax/bad-arguments"), loadFixture(t, "syntax/structure")}
	want := make([]int, len(bundles))
	for i, b := range bundles {
		ps, err := kind.SyntaxChecker{}.Check(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = len(ps)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8*len(bundles))
	for range 8 {
		for i, b := range bundles {
			wg.Go(func() {
				ps, err := kind.SyntaxChecker{}.Check(context.Background(), b)
				if err == nil && len(ps) != want[i] {
					err = fmt.Errorf("bundle %d: %d problems, want %d", i, len(ps), want[i])
				}
				if err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// bigConfig renders a configuration with n backends of 10 servers each,
// routed by a host map.
func bigConfig(n int) msg.Bundle {
	var b strings.Builder
	b.WriteString("global\n  log stdout format raw local0\n  crt-base /etc/haproxy/certs\n\ndefaults\n  mode http\n  log global\n  option httplog\n  timeout connect 5s\n  timeout client 50s\n  timeout server 50s\n  errorfile 503 /etc/haproxy/files/503.http\n\n")
	b.WriteString("frontend http_frontend\n  bind 127.0.0.1:8080\n  bind 127.0.0.1:8443 ssl crt site.pem\n")
	b.WriteString("  http-request set-var(txn.host) req.hdr(Host),field(1,:),lower\n")
	b.WriteString("  http-request set-var(txn.backend) var(txn.host),map(/etc/haproxy/maps/host.map)\n")
	for i := range n {
		fmt.Fprintf(&b, "  use_backend be_%d if { var(txn.backend) -m str be_%d }\n", i, i)
	}
	b.WriteString("  default_backend be_0\n\n")
	var hosts strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "backend be_%d\n  balance roundrobin\n  option httpchk GET /healthz\n  default-server check inter 2s fall 3 rise 2\n", i)
		b.WriteString("  http-request set-header X-Forwarded-Proto https if { ssl_fc }\n")
		for j := range 10 {
			fmt.Fprintf(&b, "  server SRV_%d 10.%d.%d.%d:8080 weight 10\n", j, i/256, i%256, j+1)
		}
		fmt.Fprintf(&hosts, "host%d.example.com be_%d\n", i, i)
	}
	bundle, err := msg.NewBundle("t", fixtureBase, "haproxy.cfg", []msg.BundleFile{
		{Path: "certs/site.pem", Kind: msg.FileCert, Content: []byte("pem")},
		{Path: "files/503.http", Kind: msg.FileFile, Content: []byte("HTTP/1.0 503\r\n\r\n")},
		{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte(b.String())},
		{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte(hosts.String())},
	})
	if err != nil {
		panic(err)
	}
	return bundle
}

func TestSyntaxCheckerBigConfig(t *testing.T) {
	got, err := kind.SyntaxChecker{}.Check(context.Background(), bigConfig(200))
	if err != nil || len(got) != 0 {
		t.Fatalf("200 backends: %v, %v", got, err)
	}
}

func BenchmarkSyntax(b *testing.B) {
	bundle := bigConfig(200)
	b.SetBytes(int64(len(bundle.Files[2].Content)))
	b.ReportAllocs()
	for b.Loop() {
		ps, err := kind.SyntaxChecker{}.Check(context.Background(), bundle)
		if err != nil || len(ps) != 0 {
			b.Fatalf("%v, %v", ps, err)
		}
	}
}
