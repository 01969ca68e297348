package librarytest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/testkit"
)

// Render compiles tc (as target "edge") and renders it over ix.
func Render(t testing.TB, tc config.Target, ix *index.Index) target.Result {
	t.Helper()
	tg, err := target.Compile("edge", tc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tg.Render(context.Background(), ix.Stores(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Incremental compiles tc (as target "edge"), makes its cache follow
// every change of ix, and returns what renders it over ix again, reusing
// what the changes since the last render left valid.
func Incremental(t testing.TB, tc config.Target, ix *index.Index) func() target.Result {
	t.Helper()
	tg, err := target.Compile("edge", tc)
	if err != nil {
		t.Fatal(err)
	}
	ix.Observe(func(c index.Change) {
		tg.Invalidate([]engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}})
	})
	return func() target.Result {
		t.Helper()
		r, err := tg.Render(context.Background(), ix.Stores(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// WriteBundle writes b's files below dir.
func WriteBundle(t testing.TB, dir string, b msg.Bundle) {
	t.Helper()
	for _, f := range b.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// HAProxyCheck runs `haproxy -c` on the bundle b laid out in dir, which
// must be the bundle's base; a warning fails the test too.
func HAProxyCheck(t testing.TB, dir string, b msg.Bundle) {
	t.Helper()
	if b.Base != dir {
		t.Fatalf("bundle base %q is not the folder %q it is checked in", b.Base, dir)
	}
	WriteBundle(t, dir, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testkit.HAProxy(t), "-c", "-f", filepath.Join(dir, target.MainFile))
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s\n--- haproxy.cfg ---\n%s", err, out.String(), numbered(FileContent(b, target.MainFile)))
	}
	if strings.Contains(out.String(), "[WARNING]") {
		t.Errorf("haproxy -c warns:\n%s", out.String())
	}
}

// FileContent is the content of the file p of b ("" without it).
func FileContent(b msg.Bundle, p string) string {
	for _, f := range b.Files {
		if f.Path == p {
			return string(f.Content)
		}
	}
	return ""
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}
