package host

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// taken returns an address another listener holds until the test ends.
func taken(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().String()
}

func TestCheckAddrs(t *testing.T) {
	busy := taken(t)
	for _, tc := range []struct {
		name  string
		addrs []Addr
		want  []string // in the error; none: no error
	}{
		{"free", []Addr{{Addr: "127.0.0.1:0", What: "a", Change: "--a"}}, nil},
		{"taken", []Addr{{Addr: "127.0.0.1:0", What: "a", Change: "--a"}, {Addr: busy, What: "b", Change: "--b or WEFT_B"}},
			[]string{busy + " (b): address in use", "--b or WEFT_B"}},
		{"malformed", []Addr{{Addr: "127.0.0.1", What: "c", Change: "--c"}}, []string{"127.0.0.1 (c) cannot be listened on", "--c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAddrs(tc.addrs...)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
			if strings.Contains(tc.name, "taken") != errors.Is(err, ErrAddrInUse) {
				t.Errorf("errors.Is(%v, ErrAddrInUse) = %v", err, errors.Is(err, ErrAddrInUse))
			}
		})
	}
}

// TestRunOnTakenAddresses: a process whose NATS and HTTP addresses are
// taken (a second `weft up`) fails naming both and the flags and
// environment variables that change them.
func TestRunOnTakenAddresses(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "weft.yaml")
	if err := os.WriteFile(cfg, []byte("targets: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	natsAddr, httpAddr := taken(t), taken(t)
	s := Settings{Config: cfg, Embedded: natsAddr, Listen: httpAddr, LogLevel: "error", Replicas: 1, DataDir: filepath.Join(dir, "data")}
	err := Run(context.Background(), s, Binary{Name: "test", EmbeddedDefault: true})
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("err %v, want ErrAddrInUse", err)
	}
	for _, w := range []string{natsAddr, "--nats-listen or WEFT_NATS_LISTEN", httpAddr, "--listen or WEFT_LISTEN"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
}
