package haproxycheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden want.json files from haproxy's current answers")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// haproxyPart is what a test names when haproxy is missing.
const haproxyPart = "haproxy (apt-get install haproxy)"

const (
	testBase = "/etc/haproxy"
	testMain = "haproxy.cfg"
)

// newTestChecker returns a Checker using the real haproxy, with its temp dirs
// under a fresh directory that the caller can inspect. Without haproxy the
// test ends through testkit.Need.
func newTestChecker(t testing.TB, opts ...Option) (*Checker, string) {
	t.Helper()
	root := t.TempDir()
	c, err := New(append([]Option{WithTempDir(root), WithTimeout(60 * time.Second)}, opts...)...)
	if errors.Is(err, ErrNoBinary) {
		testkit.Need(t, haproxyPart, err)
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, root
}

// assertNoTempDirs fails when a check left anything under root.
func assertNoTempDirs(t testing.TB, root string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatalf("reading temp root: %v", err)
	}
	for _, e := range entries {
		t.Errorf("temp dir left behind: %s", filepath.Join(root, e.Name()))
	}
}

// loadBundle reads testdata/<name> as a bundle, leaving out want.json.
func loadBundle(t testing.TB, name string) []File {
	t.Helper()
	dir := filepath.Join("testdata", name)
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "want.json" {
			return nil
		}
		content, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: filepath.ToSlash(rel), Content: content})
		return nil
	})
	if err != nil {
		t.Fatalf("loading bundle %s: %v", name, err)
	}
	return files
}

func readWant(t testing.TB, name string) []Problem {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name, "want.json"))
	if err != nil {
		t.Fatalf("reading golden: %v (run with -update to create it)", err)
	}
	var want []Problem
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("decoding golden %s: %v", name, err)
	}
	return want
}

func writeWant(t testing.TB, name string, got []Problem) {
	t.Helper()
	if got == nil {
		got = []Problem{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(got); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", name, "want.json"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sameProblems(got, want []Problem) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func dump(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "\n\t%s", p)
	}
	if b.Len() == 0 {
		return " (none)"
	}
	return b.String()
}

type goldenCase struct {
	name    string
	invalid bool
	// check holds assertions that pin the point of the case beyond the golden
	// file, so an -update cannot silently bless a wrong answer.
	check func(t *testing.T, got []Problem)
}

// hasProblem asserts that one problem has this severity, file, line and a
// message containing substr.
func hasProblem(sev, file string, line int, substr string) func(*testing.T, []Problem) {
	return func(t *testing.T, got []Problem) {
		t.Helper()
		for _, p := range got {
			if p.Severity == sev && p.File == file && p.Line == line && strings.Contains(p.Message, substr) {
				return
			}
		}
		t.Errorf("no %s at %s:%d containing %q in:%s", sev, file, line, substr, dump(got))
	}
}

var goldenCases = []goldenCase{
	{name: "valid", check: func(t *testing.T, got []Problem) {
		if got != nil {
			t.Errorf("valid bundle: want nil problems, got:%s", dump(got))
		}
	}},
	{name: "bare-base"},
	{name: "not-checked"},
	{name: "warnings", check: func(t *testing.T, got []Problem) {
		hasProblem(SeverityWarning, testMain, 17, "'http-request' rule placed after a 'use_backend' rule")(t, got)
		hasProblem(SeverityWarning, "", 0, "missing timeouts for proxy 'raw'. While not properly invalid")(t, got)
	}},
	{name: "unknown-keyword", invalid: true, check: hasProblem(SeverityAlert, testMain, 11, "unknown keyword 'retry-on-everything' in 'defaults' section")},
	{name: "missing-map", invalid: true, check: hasProblem(SeverityAlert, testMain, 23, "failed to open pattern file <maps/path-exact.map>")},
	{name: "missing-backend", invalid: true, check: hasProblem(SeverityAlert, "", 0, "Proxy 'http_frontend': unable to find required use_backend: 'be_checkout'.")},
	{name: "outside-base", invalid: true, check: hasProblem(SeverityAlert, testMain, 11, "failed to open pattern file </etc/haproxy2/maps/host.map>")},
	{name: "bad-cert", invalid: true, check: hasProblem(SeverityAlert, testMain, 12, "unable to load certificate from file 'certs/site.pem'")},
	{name: "typed-map", invalid: true, check: hasProblem(SeverityAlert, testMain, 10, "'not-an-address' is not a valid IPv4 or IPv6 address at line 2 of file 'maps/net.map'")},
	{name: "unknown-user", invalid: true, check: hasProblem(SeverityAlert, testMain, 3, "cannot find user id for 'weft-no-such-user'")},
	{name: "unresolvable-server", invalid: true, check: hasProblem(SeverityAlert, testMain, 13, "could not resolve address 'backend.weft.invalid'")},
	{name: "no-listener", invalid: true, check: hasProblem(SeverityAlert, "", 0, "Configuration file has no error but will not start (no listener)")},
}

func firstAlert(ps []Problem) Problem {
	for _, p := range ps {
		if p.Severity == SeverityAlert {
			return p
		}
	}
	return Problem{Message: "(no alert)"}
}

func verify(t *testing.T, tc goldenCase, got []Problem, err error, root string) {
	t.Helper()
	switch {
	case tc.invalid && !errors.Is(err, ErrInvalid):
		t.Fatalf("want an error wrapping ErrInvalid, got %v; problems:%s", err, dump(got))
	case !tc.invalid && err != nil:
		t.Fatalf("want no error, got %v; problems:%s", err, dump(got))
	}
	for _, p := range got {
		if strings.Contains(p.File, root) || strings.Contains(p.Message, root) {
			t.Errorf("temp path leaked into %+v", p)
		}
		if p.Severity != SeverityAlert && p.Severity != SeverityWarning {
			t.Errorf("bad severity in %+v", p)
		}
	}
	if err != nil && strings.Contains(err.Error(), root) {
		t.Errorf("temp path leaked into the error: %v", err)
	}
	if tc.invalid {
		if first := firstAlert(got); !strings.Contains(err.Error(), first.Message) {
			t.Errorf("error %q does not quote the first alert %q", err, first.Message)
		}
		alerts := 0
		for _, p := range got {
			if p.Severity == SeverityAlert {
				alerts++
			}
		}
		if alerts == 0 {
			t.Errorf("invalid bundle reported no alert:%s", dump(got))
		}
	}
	if tc.check != nil {
		tc.check(t, got)
	}
}

func TestCheckGolden(t *testing.T) {
	c, root := newTestChecker(t)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Check(context.Background(), loadBundle(t, tc.name), testMain, testBase)
			assertNoTempDirs(t, root)
			verify(t, tc, got, err, root)
			if *update {
				writeWant(t, tc.name, got)
				return
			}
			if want := readWant(t, tc.name); !sameProblems(got, want) {
				t.Errorf("problems differ from testdata/%s/want.json\ngot:%s\nwant:%s", tc.name, dump(got), dump(want))
			}
		})
	}
}

func TestCheckConcurrent(t *testing.T) {
	if *update {
		t.Skip("golden files are being rewritten")
	}
	c, root := newTestChecker(t)
	var wg sync.WaitGroup
	type result struct {
		tc   goldenCase
		got  []Problem
		err  error
		want []Problem
	}
	results := make(chan result, 3*len(goldenCases))
	for range 3 {
		for _, tc := range goldenCases {
			files := loadBundle(t, tc.name)
			want := readWant(t, tc.name)
			wg.Go(func() {
				got, err := c.Check(context.Background(), files, testMain, testBase)
				results <- result{tc: tc, got: got, err: err, want: want}
			})
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		t.Run(r.tc.name, func(t *testing.T) {
			verify(t, r.tc, r.got, r.err, root)
			if !sameProblems(r.got, r.want) {
				t.Errorf("concurrent check differs from golden\ngot:%s\nwant:%s", dump(r.got), dump(r.want))
			}
		})
	}
	assertNoTempDirs(t, root)
}

func TestCheckBadPath(t *testing.T) {
	c, root := newTestChecker(t)
	cfg := []byte("defaults\n  mode http\n")
	tests := []struct {
		name  string
		files []File
		main  string
		base  string
	}{
		{"absolute file", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: "/etc/passwd"}}, "haproxy.cfg", testBase},
		{"dot-dot escape", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: "../evil.map"}}, "haproxy.cfg", testBase},
		{"dot-dot inside", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: "maps/../../evil.map"}}, "haproxy.cfg", testBase},
		{"dot-dot that stays inside", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: "maps/../host.map"}}, "haproxy.cfg", testBase},
		{"empty path", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: ""}}, "haproxy.cfg", testBase},
		{"bundle root", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: "./"}}, "haproxy.cfg", testBase},
		{"NUL byte", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: "maps/a\x00b"}}, "haproxy.cfg", testBase},
		{"duplicate", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: "./haproxy.cfg"}}, "haproxy.cfg", testBase},
		{"file and directory", []File{{Path: "haproxy.cfg", Content: cfg}, {Path: "maps"}, {Path: "maps/host.map"}}, "haproxy.cfg", testBase},
		{"absolute main", []File{{Path: "haproxy.cfg", Content: cfg}}, "/etc/haproxy/haproxy.cfg", testBase},
		{"main outside", []File{{Path: "haproxy.cfg", Content: cfg}}, "../haproxy.cfg", testBase},
		{"main missing", []File{{Path: "other.cfg", Content: cfg}}, "haproxy.cfg", testBase},
		{"relative base", []File{{Path: "haproxy.cfg", Content: cfg}}, "haproxy.cfg", "etc/haproxy"},
		{"root base", []File{{Path: "haproxy.cfg", Content: cfg}}, "haproxy.cfg", "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Check(context.Background(), tt.files, tt.main, tt.base)
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("want ErrBadPath, got %v", err)
			}
			if errors.Is(err, ErrInvalid) {
				t.Errorf("a bad path must not read as an invalid config: %v", err)
			}
			if got != nil {
				t.Errorf("want no problems, got:%s", dump(got))
			}
			assertNoTempDirs(t, root)
		})
	}
}

func TestNewNoBinary(t *testing.T) {
	t.Run("explicit path", func(t *testing.T) {
		_, err := New(WithBinary(filepath.Join(t.TempDir(), "haproxy")))
		if !errors.Is(err, ErrNoBinary) {
			t.Fatalf("want ErrNoBinary, got %v", err)
		}
	})
	t.Run("not in PATH nor fallback", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		saved := fallbackBinaries
		t.Cleanup(func() { fallbackBinaries = saved })
		fallbackBinaries = []string{filepath.Join(t.TempDir(), "haproxy")}
		_, err := New()
		if !errors.Is(err, ErrNoBinary) {
			t.Fatalf("want ErrNoBinary, got %v", err)
		}
	})
	t.Run("not executable", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "haproxy")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := New(WithBinary(p))
		if !errors.Is(err, ErrNoBinary) {
			t.Fatalf("want ErrNoBinary, got %v", err)
		}
	})
}

func TestNewFallbackBinary(t *testing.T) {
	real, _ := newTestChecker(t)
	t.Setenv("PATH", t.TempDir())
	saved := fallbackBinaries
	t.Cleanup(func() { fallbackBinaries = saved })
	fallbackBinaries = []string{filepath.Join(t.TempDir(), "haproxy"), real.Binary()}
	c, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if c.Binary() != real.Binary() {
		t.Errorf("Binary() = %q, want the fallback %q", c.Binary(), real.Binary())
	}
}

// TestEnvBinary: $WEFT_HAPROXY names the binary New and Find use, in
// place of PATH and the fallback; WithBinary still wins.
func TestEnvBinary(t *testing.T) {
	real, _ := newTestChecker(t)
	copied := filepath.Join(t.TempDir(), "haproxy-copy")
	copyFile(t, real.Binary(), copied, 0o755)
	missing := filepath.Join(t.TempDir(), "haproxy")
	cases := []struct {
		name, env, with string
		want            string // the binary; "" for ErrNoBinary
	}{
		{"unset", "", "", real.Binary()},
		{"a path", copied, "", copied},
		{"a missing path, though haproxy is installed", missing, "", ""},
		{"WithBinary over the variable", missing, copied, copied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvBinary, tc.env)
			var opts []Option
			if tc.with != "" {
				opts = append(opts, WithBinary(tc.with))
			}
			c, err := New(opts...)
			found, findErr := Find()
			if tc.want == "" {
				if !errors.Is(err, ErrNoBinary) || !errors.Is(findErr, ErrNoBinary) {
					t.Fatalf("New: %v, Find: %v; want ErrNoBinary from both", err, findErr)
				}
				for _, says := range []string{missing, Install, EnvBinary} {
					if !strings.Contains(err.Error(), says) {
						t.Errorf("error %q does not say %q", err, says)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if c.Binary() != tc.want {
				t.Errorf("Binary() = %q, want %q", c.Binary(), tc.want)
			}
			if tc.with == "" && (findErr != nil || found != tc.want) {
				t.Errorf("Find() = %q, %v; want %q", found, findErr, tc.want)
			}
		})
	}
}

func TestNewOptions(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := New(WithTimeout(d)); err == nil {
			t.Errorf("WithTimeout(%v): want an error", d)
		}
	}
	if _, err := New(WithTempDir("")); err == nil {
		t.Error("WithTempDir(\"\"): want an error")
	}
	if _, err := New(WithBinary("")); !errors.Is(err, ErrNoBinary) {
		t.Errorf("WithBinary(\"\"): want ErrNoBinary, got %v", err)
	}
}

func copyFile(t *testing.T, src, dst string, mode fs.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckBinaryVanished(t *testing.T) {
	real, _ := newTestChecker(t)
	bin := filepath.Join(t.TempDir(), "haproxy")
	copyFile(t, real.Binary(), bin, 0o755)
	c, root := newTestChecker(t, WithBinary(bin))
	files := loadBundle(t, "valid")
	if _, err := c.Check(context.Background(), files, testMain, testBase); err != nil {
		t.Fatalf("copied binary should work before it vanishes: %v", err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	got, err := c.Check(context.Background(), files, testMain, testBase)
	if err == nil || errors.Is(err, ErrInvalid) {
		t.Fatalf("want a retryable error, got %v", err)
	}
	if !errors.Is(err, ErrNoBinary) {
		t.Errorf("want the error to wrap ErrNoBinary, got %v", err)
	}
	if got != nil {
		t.Errorf("want no problems, got:%s", dump(got))
	}
	assertNoTempDirs(t, root)
}

func TestCheckFailingBinaryIsNotInvalid(t *testing.T) {
	dir := t.TempDir()
	tests := map[string]string{
		"silent exit 1":   "#!/bin/sh\nexit 1\n",
		"loader failure":  "#!/bin/sh\necho 'error while loading shared libraries: libfoo.so' >&2\nexit 127\n",
		"killed":          "#!/bin/sh\nkill -9 $$\n",
		"notice then one": "#!/bin/sh\necho '[NOTICE]   (1) : haproxy version is 0' >&2\nexit 1\n",
	}
	for name, script := range tests {
		t.Run(name, func(t *testing.T) {
			bin := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			c, root := newTestChecker(t, WithBinary(bin))
			got, err := c.Check(context.Background(), loadBundle(t, "valid"), testMain, testBase)
			if err == nil || errors.Is(err, ErrInvalid) {
				t.Fatalf("want a retryable error, got %v; problems:%s", err, dump(got))
			}
			if strings.Contains(err.Error(), root) {
				t.Errorf("temp path leaked into error: %v", err)
			}
			assertNoTempDirs(t, root)
		})
	}
}

func TestCheckTempDirUnwritable(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, root := range map[string]string{
		"root is a file":    notDir,
		"root is missing":   filepath.Join(t.TempDir(), "missing"),
		"root needs quotes": filepath.Join(t.TempDir(), "with space"),
	} {
		t.Run(name, func(t *testing.T) {
			if name == "root needs quotes" {
				if err := os.Mkdir(root, 0o700); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { assertNoTempDirs(t, root) })
			}
			c, _ := newTestChecker(t, WithTempDir(root))
			got, err := c.Check(context.Background(), loadBundle(t, "valid"), testMain, testBase)
			if err == nil || errors.Is(err, ErrInvalid) {
				t.Fatalf("want a retryable error, got %v", err)
			}
			if got != nil {
				t.Errorf("want no problems, got:%s", dump(got))
			}
		})
	}
}

// hangBundle is a bundle whose lua-load script starts a child process, marks
// that it is running and then never returns, so only a kill ends haproxy -c.
func hangBundle(marker string) []File {
	cfg := "global\n  lua-load " + testBase + "/hang.lua\n"
	lua := fmt.Sprintf(`os.execute("sh -c 'while :; do sleep 1; done' %s &")
local f = io.open("started", "w")
f:write("yes")
f:close()
while true do end
`, marker)
	return []File{{Path: testMain, Content: []byte(cfg)}, {Path: "hang.lua", Content: []byte(lua)}}
}

// waitStarted waits until a hangBundle check is running under root.
func waitStarted(t *testing.T, root string, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		matches, _ := filepath.Glob(filepath.Join(root, "*", "started"))
		if len(matches) > 0 {
			return
		}
		select {
		case <-done:
			t.Fatal("check returned before haproxy started the script")
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("haproxy never started the lua script")
}

func requireProc(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("needs /proc to look for leftover processes")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh for the child process of the hanging script")
	}
}

func TestCheckTimeoutKillsHaproxy(t *testing.T) {
	requireProc(t)
	c, root := newTestChecker(t, WithTimeout(1500*time.Millisecond))
	marker := "weft-hang-" + filepath.Base(filepath.Dir(root))
	type result struct {
		got []Problem
		err error
	}
	done := make(chan struct{})
	res := make(chan result, 1)
	go func() {
		defer close(done)
		got, err := c.Check(context.Background(), hangBundle(marker), testMain, testBase)
		res <- result{got, err}
	}()
	waitStarted(t, root, done)
	var r result
	select {
	case r = <-res:
	case <-time.After(60 * time.Second):
		t.Fatal("Check did not return after its timeout: haproxy was not killed")
	}
	if !errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, ErrInvalid) {
		t.Fatalf("want a DeadlineExceeded error that is not ErrInvalid, got %v", r.err)
	}
	if r.got != nil {
		t.Errorf("want no problems, got:%s", dump(r.got))
	}
	if left := testkit.ProcessesNaming(t, root); len(left) > 0 {
		t.Errorf("haproxy still running after Check returned: %v", left)
	}
	if left := testkit.ProcessesNaming(t, marker); len(left) > 0 {
		t.Errorf("haproxy's child still running after Check returned: %v", left)
	}
	assertNoTempDirs(t, root)
}

func TestCheckCancelKillsHaproxy(t *testing.T) {
	requireProc(t)
	c, root := newTestChecker(t)
	marker := "weft-hang-" + filepath.Base(filepath.Dir(root))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	var got []Problem
	var err error
	go func() {
		defer close(done)
		got, err = c.Check(ctx, hangBundle(marker), testMain, testBase)
	}()
	waitStarted(t, root, done)
	cancel()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Check did not return after cancel: haproxy was not killed")
	}
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrInvalid) {
		t.Fatalf("want a Canceled error that is not ErrInvalid, got %v", err)
	}
	if got != nil {
		t.Errorf("want no problems, got:%s", dump(got))
	}
	if left := testkit.ProcessesNaming(t, root); len(left) > 0 {
		t.Errorf("haproxy still running after Check returned: %v", left)
	}
	if left := testkit.ProcessesNaming(t, marker); len(left) > 0 {
		t.Errorf("haproxy's child still running after Check returned: %v", left)
	}
	assertNoTempDirs(t, root)
}

func TestCheckCanceledBeforeStart(t *testing.T) {
	c, root := newTestChecker(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := c.Check(ctx, loadBundle(t, "valid"), testMain, testBase)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrInvalid) {
		t.Fatalf("want a Canceled error that is not ErrInvalid, got %v", err)
	}
	if got != nil {
		t.Errorf("want no problems, got:%s", dump(got))
	}
	assertNoTempDirs(t, root)
}

func TestCheckDefaultTempDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	c, err := New()
	if errors.Is(err, ErrNoBinary) {
		testkit.Need(t, haproxyPart, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Check(context.Background(), loadBundle(t, "missing-map"), testMain, testBase)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("want ErrInvalid, got %v", err)
	}
	for _, p := range got {
		if strings.Contains(p.Message, tmp) {
			t.Errorf("temp path leaked into %+v", p)
		}
	}
	assertNoTempDirs(t, tmp)
}

// A check marked Behind runs haproxy at BehindNice, one not marked at the
// validator's own priority; both with the real haproxy's verdict (the
// wrapper notes its nice value, then runs it).
func TestCheckBehindRunsNiced(t *testing.T) {
	real, _ := newTestChecker(t)
	dir := t.TempDir()
	own, err := exec.Command("nice").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"behind", Behind(context.Background()), strconv.Itoa(BehindNice)},
		{"waited for", context.Background(), strings.TrimSpace(string(own))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noted := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".nice")
			bin := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".sh")
			// The priority is set once haproxy has started: wait a moment
			// before reading it.
			script := fmt.Sprintf("#!/bin/sh\nsleep 0.5\nnice > %q\nexec %q \"$@\"\n", noted, real.Binary())
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			c, _ := newTestChecker(t, WithBinary(bin))
			got, err := c.Check(tc.ctx, loadBundle(t, "valid"), testMain, testBase)
			if err != nil {
				t.Fatalf("check: %v; problems:%s", err, dump(got))
			}
			data, err := os.ReadFile(noted)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.TrimSpace(string(data)); n != tc.want {
				t.Errorf("haproxy ran at nice %s, want %s", n, tc.want)
			}
		})
	}
}
