package msg_test

import (
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

func TestRewriteBase(t *testing.T) {
	const base, dir = "/etc/haproxy", "/tmp/d"
	tests := []struct{ in, want string }{
		{"map(/etc/haproxy/maps/host.map)", "map(/tmp/d/maps/host.map)"},
		{"errorfile 400 /etc/haproxy/files/400.http", "errorfile 400 /tmp/d/files/400.http"},
		{"map(/etc/haproxy/maps/a.map,'') map_beg(/etc/haproxy/maps/b.map)", "map(/tmp/d/maps/a.map,'') map_beg(/tmp/d/maps/b.map)"},
		{"crt-base /etc/haproxy", "crt-base /tmp/d"},
		{"crt-base /etc/haproxy\n", "crt-base /tmp/d\n"},
		{"/etc/haproxy/haproxy.cfg", "/tmp/d/haproxy.cfg"},
		{`"/etc/haproxy/x y"`, `"/tmp/d/x y"`},
		{"map(/etc/haproxy2/maps/host.map)", "map(/etc/haproxy2/maps/host.map)"},
		{"map(/opt/etc/haproxy/maps/host.map)", "map(/opt/etc/haproxy/maps/host.map)"},
		{"file /etc/haproxy.d/x", "file /etc/haproxy.d/x"},
		{"ca-base /etc/ssl/certs", "ca-base /etc/ssl/certs"},
		{"no base here", "no base here"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := string(msg.RewriteBase([]byte(tt.in), base, dir)); got != tt.want {
			t.Errorf("msg.RewriteBase(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRelocate moves a bundle to another folder: the main configuration
// names the new folder, other files are untouched, the hash is new, and a
// bundle already there is kept as it is.
func TestRelocate(t *testing.T) {
	b, err := msg.NewBundle("edge", "/etc/haproxy", "haproxy.cfg", []msg.BundleFile{
		{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte("use_backend %[req.hdr(host),map(/etc/haproxy/maps/host.map)]\n")},
		{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte("/etc/haproxy stays\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Relocate("/srv/a")
	if err != nil {
		t.Fatal(err)
	}
	if r.Base != "/srv/a" || r.Hash == b.Hash || r.Consistent() != nil {
		t.Fatalf("relocated: base %q hash %q (was %q) consistent: %v", r.Base, r.Hash, b.Hash, r.Consistent())
	}
	if got := string(r.Files[0].Content); got != "use_backend %[req.hdr(host),map(/srv/a/maps/host.map)]\n" {
		t.Errorf("main = %q", got)
	}
	if got := string(r.Files[1].Content); got != "/etc/haproxy stays\n" {
		t.Errorf("map = %q", got)
	}
	if same, _ := b.Relocate("/etc/haproxy"); same.Hash != b.Hash {
		t.Error("relocating to the base changed the bundle")
	}
	if _, err := b.Relocate("rel"); err == nil {
		t.Error("relative folder accepted")
	}
}

func TestBundleFileSecret(t *testing.T) {
	tests := []struct {
		name string
		f    msg.BundleFile
		want bool
	}{
		{"certificate", msg.BundleFile{Kind: msg.FileCert, Content: []byte("-----BEGIN CERTIFICATE-----\n")}, true},
		{"empty certificate", msg.BundleFile{Kind: msg.FileCert}, true},
		{"file with a private key", msg.BundleFile{Kind: msg.FileFile, Content: []byte("-----BEGIN PRIVATE KEY-----\nMC4\n-----END PRIVATE KEY-----\n")}, true},
		{"file with an EC key", msg.BundleFile{Kind: msg.FileFile, Content: []byte("x\n-----BEGIN EC PRIVATE KEY-----\n")}, true},
		{"configuration with an RSA key", msg.BundleFile{Kind: msg.FileConfig, Content: []byte("-----BEGIN RSA PRIVATE KEY-----\n")}, true},
		{"map", msg.BundleFile{Kind: msg.FileMap, Content: []byte("a b\n")}, false},
		{"public certificate as a file", msg.BundleFile{Kind: msg.FileFile, Content: []byte("-----BEGIN CERTIFICATE-----\n")}, false},
		{"configuration", msg.BundleFile{Kind: msg.FileConfig, Content: []byte("global\n")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.Secret(); got != tt.want {
				t.Errorf("Secret() = %v, want %v", got, tt.want)
			}
		})
	}
}
