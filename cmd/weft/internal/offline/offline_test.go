package offline

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// TestWriteKeepsKeysPrivate: certificates and files holding a private key
// are written 0600, also over a world-readable file already there; the
// others 0644.
func TestWriteKeepsKeysPrivate(t *testing.T) {
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "certs", "site.pem"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := msg.NewBundle("t", "/etc/haproxy", "haproxy.cfg", []msg.BundleFile{
		{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte("global\n")},
		{Path: "certs/site.pem", Kind: msg.FileCert, Content: []byte("-----BEGIN CERTIFICATE-----\n")},
		{Path: "files/key.pem", Kind: msg.FileFile, Content: []byte("-----BEGIN PRIVATE KEY-----\n")},
		{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte("a b\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := write(out, b); err != nil {
		t.Fatal(err)
	}
	for _, f := range b.Files {
		fi, err := os.Stat(filepath.Join(out, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		want := fs.FileMode(0o644)
		if f.Secret() {
			want = 0o600
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode = %v, want %v", f.Path, fi.Mode().Perm(), want)
		}
	}
}
