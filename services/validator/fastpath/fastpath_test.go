package fastpath_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator/fastpath"
	"github.com/weftio/weft/services/validator/haproxycheck"
	"github.com/weftio/weft/services/validator/kind"
)

// loadBase reads the bundle under testdata/base: haproxy.cfg is the main
// file, maps/ the map and pattern files, certs/ the certificates.
func loadBase(t testing.TB) msg.Bundle {
	t.Helper()
	var files []msg.BundleFile
	root := filepath.Join("testdata", "base")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		k := msg.FileConfig
		switch {
		case strings.HasPrefix(rel, "maps/"):
			k = msg.FileMap
		case strings.HasPrefix(rel, "certs/"):
			k = msg.FileCert
		}
		files = append(files, msg.BundleFile{Path: filepath.ToSlash(rel), Kind: k, Content: data})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := msg.NewBundle("edge", "/etc/haproxy", "haproxy.cfg", files)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fixture(t testing.TB, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "certs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// edit changes one file of a bundle: old replaced by new (old empty: the
// whole content is new; a file not in the bundle is added).
type edit struct{ file, old, new string }

func apply(t testing.TB, b msg.Bundle, edits ...edit) msg.Bundle {
	t.Helper()
	files := make([]msg.BundleFile, 0, len(b.Files)+1)
	for _, f := range b.Files {
		f.Content = append([]byte(nil), f.Content...)
		files = append(files, f)
	}
	for _, e := range edits {
		found := false
		for i := range files {
			if files[i].Path != e.file {
				continue
			}
			found = true
			switch {
			case e.old == "":
				files[i].Content = []byte(e.new)
			case !strings.Contains(string(files[i].Content), e.old):
				t.Fatalf("%s has no %q", e.file, e.old)
			default:
				files[i].Content = []byte(strings.Replace(string(files[i].Content), e.old, e.new, 1))
			}
		}
		if !found {
			files = append(files, msg.BundleFile{Path: e.file, Kind: msg.FileFile, Content: []byte(e.new)})
		}
	}
	nb, err := msg.NewBundle(b.Target, b.Base, b.Main, files)
	if err != nil {
		t.Fatal(err)
	}
	return nb
}

// fullCheck runs the haproxy kind's whole check (real haproxy -c).
func fullCheck(t testing.TB, hc kind.HAProxyChecker, b msg.Bundle) (bool, []msg.Problem) {
	t.Helper()
	problems, err := hc.Check(context.Background(), b)
	if err != nil {
		t.Fatalf("haproxy -c could not decide: %v", err)
	}
	return !kind.Failed(problems), problems
}

func haproxyKind(t testing.TB) kind.HAProxyChecker {
	t.Helper()
	bin := testkit.HAProxy(t)
	c, err := haproxycheck.New(haproxycheck.WithBinary(bin))
	if err != nil {
		t.Fatal(err)
	}
	return kind.HAProxyChecker{C: c}
}

const cfg = "haproxy.cfg"

func TestProve(t *testing.T) {
	hc := haproxyKind(t)
	base := loadBase(t)
	if ok, problems := fullCheck(t, hc, base); !ok {
		t.Fatalf("the base bundle must pass haproxy -c: %v", problems)
	}
	for _, tc := range []struct {
		name  string
		edits []edit
		want  fastpath.Result
		full  string // a substring of the reason a full check is needed; "" proven
	}{
		{name: "unchanged"},
		{name: "endpoint fills a free slot", edits: []edit{{cfg, "server SRV_2 127.0.0.1:1 disabled", "server SRV_2 10.0.0.2:8080"}}, want: fastpath.Result{Servers: 1}},
		{name: "endpoint leaves its slot", edits: []edit{{cfg, "server SRV_1 10.0.0.1:8080 weight 100", "server SRV_1 127.0.0.1:1 weight 100 disabled"}}, want: fastpath.Result{Servers: 1}},
		{name: "weight and state", edits: []edit{{cfg, "weight 100", "weight 0 enabled"}, {cfg, "server s1 10.0.0.9:80", "server s1 10.0.0.9:81 weight 256"}}, want: fastpath.Result{Servers: 2}},
		{name: "IPv6 endpoint", edits: []edit{{cfg, "[fd00::1]:8080 check", "[2001:db8::7]:65535 check"}}, want: fastpath.Result{Servers: 1}},
		{name: "map lines of every use", edits: []edit{
			{"maps/hosts.map", "", "app.example be_app\nnew.example be_app\n"},
			{"maps/prefix.map", "/static", "/assets"},
			{"maps/regex.map", "", "^/v[0-9]+/ be_app\n^/(a|b)\\.json$ be_default\n"},
			{"maps/rates.map", "", "10.0.0.0/8 100\n2001:db8::/32 -7\n"},
			{"maps/tiers.map", "2 silver", "3 gold"},
			{"maps/via.map", "10.0.0.1", "192.0.2.1"},
			{"maps/lan.acl", "", "10.0.0.0/8\n172.16.0.0/12\n# comment\n\n"},
		}, want: fastpath.Result{MapLines: 9}},
		{name: "certificate replaced", edits: []edit{{"certs/site.pem", "", fixture(t, "ec.pem")}}, want: fastpath.Result{Certs: 1}},
		{name: "another certificate with its key", edits: []edit{{"certs/site.pem", "", fixture(t, "other.pem")}}, want: fastpath.Result{Certs: 1}},

		{name: "server option added", edits: []edit{{cfg, "weight 100", "weight 100 check"}}, full: "beyond its address"},
		{name: "server renamed", edits: []edit{{cfg, "server SRV_2 127.0.0.1:1", "server SRV_9 127.0.0.1:1"}}, full: "beyond its address"},
		{name: "other line", edits: []edit{{cfg, "timeout client 50s", "timeout client 51s"}}, full: "outside a backend"},
		{name: "backend line other than a server", edits: []edit{{cfg, "balance roundrobin", "balance leastconn"}}, full: "not a server line"},
		{name: "line added", edits: []edit{{cfg, "  server SRV_4", "  server SRV_5 127.0.0.1:1 disabled\n  server SRV_4"}}, full: "lines added"},
		{name: "port 0", edits: []edit{{cfg, "10.0.0.1:8080", "10.0.0.1:0"}}, full: "port"},
		{name: "port 70000", edits: []edit{{cfg, "10.0.0.1:8080", "10.0.0.1:70000"}}, full: "port"},
		{name: "weight 300", edits: []edit{{cfg, "weight 100", "weight 300"}}, full: "weight"},
		{name: "weight -1", edits: []edit{{cfg, "weight 100", "weight -1"}}, full: "weight"},
		{name: "host name address", edits: []edit{{cfg, "10.0.0.1:8080", "backend.example:8080"}}, full: "IPv4"},
		{name: "IPv6 without brackets", edits: []edit{{cfg, "[fd00::1]:8080", "fd00::1:8080"}}, full: "IPv4"},
		{name: "bad CIDR in an ACL file", edits: []edit{{"maps/lan.acl", "192.168.0.0/16", "192.168.0.0/33"}}, full: "not an IP"},
		{name: "non-integer output", edits: []edit{{"maps/rates.map", "192.168.1.1 5", "192.168.1.1 five"}}, full: "not an integer"},
		{name: "IP key not an IP", edits: []edit{{"maps/rates.map", "192.168.1.1 5", "gateway 5"}}, full: "not an IP"},
		{name: "int key not an integer", edits: []edit{{"maps/tiers.map", "2 silver", "two silver"}}, full: "not an integer"},
		{name: "IP output not an IP", edits: []edit{{"maps/via.map", "10.0.0.1", "10.0.0.256"}}, full: "not an IPv4"},
		{name: "regex that does not compile", edits: []edit{{"maps/regex.map", "^/v[0-9]+/", "^/v[0-9+/"}}, full: "regex"},
		{name: "regex beyond the subset", edits: []edit{{"maps/regex.map", "^/v[0-9]+/", "^/(?=v)"}}, full: "subset"},
		{name: "key without a value", edits: []edit{{"maps/hosts.map", "www.example be_app", "www.example"}}, full: "without a value"},
		{name: "map a runtime action writes", edits: []edit{{"maps/dyn.map", "seed", "other"}}, full: "not a map converter"},
		{name: "certificate and key mismatched", edits: []edit{{"certs/site.pem", "", fixture(t, "mismatched.pem")}}, full: "certs/site.pem"},
		{name: "RSA 1024 certificate", edits: []edit{{"certs/site.pem", "", fixture(t, "rsa1024.pem")}}, full: "1024 bits"},
		{name: "certificate not PEM", edits: []edit{{"certs/site.pem", "", "not a certificate\n"}}, full: "not a PEM block"},
		{name: "file added", edits: []edit{{"files/503.http", "", "HTTP/1.0 503\r\n\r\n"}}, full: "added or removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cand := apply(t, base, tc.edits...)
			got, err := fastpath.Prove(base, cand)
			if tc.full != "" {
				if !errors.Is(err, fastpath.ErrFullCheck) || !strings.Contains(err.Error(), tc.full) {
					t.Fatalf("Prove = %+v, %v; want a full check because of %q", got, err, tc.full)
				}
				return
			}
			if err != nil {
				t.Fatalf("Prove: %v", err)
			}
			if got != tc.want {
				t.Errorf("Prove checked %+v, want %+v", got, tc.want)
			}
			if ok, problems := fullCheck(t, hc, cand); !ok {
				t.Fatalf("proven, but haproxy -c refuses it: %v", problems)
			}
		})
	}
}
