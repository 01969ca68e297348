package haproxycheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrBadPath reports a bundle path, main or base that cannot be laid out
	// safely (absolute, containing "..", empty, duplicated, or not in the bundle).
	ErrBadPath = errors.New("bad bundle path")
	// ErrNoBinary reports that the haproxy binary could not be found or run.
	ErrNoBinary = errors.New("haproxy binary not found")
	// ErrInvalid reports that haproxy rejected the configuration.
	ErrInvalid = errors.New("configuration rejected by haproxy")
)

// Severities of a Problem.
const (
	SeverityAlert   = "alert"
	SeverityWarning = "warning"
)

// DefaultTimeout bounds one haproxy -c run unless WithTimeout says otherwise.
const DefaultTimeout = 10 * time.Second

// maxOutput caps how much of haproxy's output is kept.
const maxOutput = 1 << 20

// fallbackBinaries are tried, in order, when haproxy is not in PATH.
var fallbackBinaries = []string{"/usr/sbin/haproxy"}

// EnvBinary is the environment variable that, when set, names the haproxy
// binary (a path, or a name looked up in PATH) that New and Find use instead
// of looking in PATH and at /usr/sbin/haproxy.
const EnvBinary = "WEFT_HAPROXY"

// Install says how to get haproxy, for messages about its absence.
const Install = "apt-get install haproxy"

// File is one file of a rendered bundle.
type File struct {
	// Path is relative and slash-separated, e.g. "maps/host.map".
	Path    string
	Content []byte
}

// Problem is one finding reported by haproxy.
type Problem struct {
	// File is the bundle-relative path haproxy named, or "" when it named none.
	File string `json:"file,omitempty"`
	// Line is the 1-based line in File, or 0 when unknown.
	Line int `json:"line,omitempty"`
	// Severity is SeverityAlert or SeverityWarning.
	Severity string `json:"severity"`
	// Message is haproxy's text, with temporary paths mapped back to the bundle.
	Message string `json:"message"`
}

// String renders the problem as "file:line: severity: message".
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
	}
	b.WriteString(p.Severity)
	b.WriteString(": ")
	b.WriteString(p.Message)
	return b.String()
}

// Checker runs haproxy -c on bundles. It is safe for concurrent use.
type Checker struct {
	bin      string
	timeout  time.Duration
	tempRoot string // "" means os.TempDir() at check time
}

// Option configures a Checker.
type Option func(*Checker) error

// WithBinary sets the haproxy binary: a path, or a name looked up in PATH.
func WithBinary(p string) Option {
	return func(c *Checker) error {
		if p == "" {
			return fmt.Errorf("haproxycheck: %w: empty binary path", ErrNoBinary)
		}
		c.bin = p
		return nil
	}
}

// WithTimeout bounds each haproxy -c run; d must be positive.
func WithTimeout(d time.Duration) Option {
	return func(c *Checker) error {
		if d <= 0 {
			return fmt.Errorf("haproxycheck: timeout must be positive, got %v", d)
		}
		c.timeout = d
		return nil
	}
}

// WithTempDir sets the directory under which each check creates its private
// temporary directory (default os.TempDir()). It is not created by New.
func WithTempDir(dir string) Option {
	return func(c *Checker) error {
		if dir == "" {
			return errors.New("haproxycheck: empty temp dir")
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("haproxycheck: temp dir %q: %w", dir, err)
		}
		c.tempRoot = abs
		return nil
	}
}

// New returns a Checker. Without WithBinary it runs the binary Find finds;
// a binary that cannot be found is an error wrapping ErrNoBinary.
func New(opts ...Option) (*Checker, error) {
	c := &Checker{timeout: DefaultTimeout}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	bin, err := resolveBinary(c.bin)
	if err != nil {
		return nil, err
	}
	c.bin = bin
	return c, nil
}

// Binary returns the absolute path of the haproxy binary the Checker runs.
func (c *Checker) Binary() string { return c.bin }

// Find returns the absolute path of the haproxy binary: $WEFT_HAPROXY
// (EnvBinary) when set, else haproxy in PATH, else /usr/sbin/haproxy. A
// binary that cannot be found is an error wrapping ErrNoBinary.
func Find() (string, error) { return resolveBinary("") }

func resolveBinary(want string) (string, error) {
	candidates := []string{want}
	if want == "" {
		candidates = append([]string{"haproxy"}, fallbackBinaries...)
		if env := os.Getenv(EnvBinary); env != "" {
			candidates = []string{env}
		}
	}
	var errs []error
	for _, cand := range candidates {
		p, err := exec.LookPath(cand)
		if err != nil && !errors.Is(err, exec.ErrDot) {
			errs = append(errs, err)
			continue
		}
		// The process runs in the temp dir, so a relative path would resolve there.
		abs, err := filepath.Abs(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return abs, nil
	}
	return "", fmt.Errorf("haproxycheck: %w: tried %s (%s, or set %s to its path): %w", ErrNoBinary, strings.Join(candidates, ", "), Install, EnvBinary, errors.Join(errs...))
}

// Check lays files out in a fresh temporary directory, rewrites base in the
// main config to that directory and runs haproxy -c on it. See the package
// documentation for the meaning of the results.
func (c *Checker) Check(ctx context.Context, files []File, main string, base string) (problems []Problem, err error) {
	b, err := prepare(files, main, base)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("haproxycheck: not started: %w", context.Cause(ctx))
	}

	root := c.tempRoot
	if root == "" {
		if root, err = filepath.Abs(os.TempDir()); err != nil {
			return nil, fmt.Errorf("haproxycheck: temp dir: %w", err)
		}
	}
	dir, err := os.MkdirTemp(root, "weft-haproxycheck-")
	if err != nil {
		return nil, fmt.Errorf("haproxycheck: creating temp dir: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("haproxycheck: removing temp dir: %w", rmErr))
		}
	}()
	if err := checkTempPath(dir); err != nil {
		return nil, err
	}
	if err := b.layout(dir); err != nil {
		return nil, err
	}
	return c.run(ctx, dir, filepath.Join(dir, filepath.FromSlash(b.main)), tempAliases(dir))
}

// tempAliases returns the spellings haproxy may use for dir, longest first so
// that one that contains another is mapped before it.
func tempAliases(dir string) []string {
	aliases := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		aliases = append(aliases, real)
	}
	sort.Slice(aliases, func(i, j int) bool { return len(aliases[i]) > len(aliases[j]) })
	return aliases
}

func (c *Checker) run(ctx context.Context, dir, cfg string, aliases []string) ([]Problem, error) {
	runCtx, cancel := context.WithTimeoutCause(ctx, c.timeout,
		fmt.Errorf("haproxycheck: haproxy -c exceeded the %v timeout: %w", c.timeout, context.DeadlineExceeded))
	defer cancel()

	cmd := exec.CommandContext(runCtx, c.bin, "-c", "-f", cfg)
	cmd.Dir = dir
	cmd.Env = Environ(os.Environ())
	out := &cappedBuffer{max: maxOutput}
	// The same comparable writer for both streams: exec serialises the writes
	// and keeps haproxy's interleaving of stdout and stderr.
	cmd.Stdout = out
	cmd.Stderr = out
	setProcessGroup(cmd)
	cmd.WaitDelay = 2 * time.Second

	runErr := cmd.Start()
	if runErr == nil {
		if IsBehind(ctx) {
			lowerPriority(cmd.Process.Pid)
		}
		runErr = cmd.Wait()
	}
	if runErr != nil && runCtx.Err() != nil {
		return nil, fmt.Errorf("haproxycheck: haproxy -c stopped: %w", context.Cause(runCtx))
	}
	code := 0
	if runErr != nil {
		var exitErr *exec.ExitError
		if !errors.As(runErr, &exitErr) {
			if _, statErr := os.Stat(c.bin); statErr != nil {
				return nil, fmt.Errorf("haproxycheck: running %s: %w: %w", c.bin, ErrNoBinary, runErr)
			}
			return nil, fmt.Errorf("haproxycheck: running %s: %w", c.bin, runErr)
		}
		code = exitErr.ExitCode()
		if code < 0 {
			return nil, fmt.Errorf("haproxycheck: %s did not exit normally: %w", c.bin, runErr)
		}
	}

	failed := code != 0
	problems := parseOutput(out.Bytes(), failed, aliases)
	if out.dropped > 0 {
		problems = append(problems, Problem{
			Severity: severityFor(failed),
			Message:  fmt.Sprintf("haproxy output truncated: %d bytes beyond the first %d were dropped", out.dropped, maxOutput),
		})
	}
	if !failed {
		return problems, nil
	}
	alerts := 0
	var first Problem
	for _, p := range problems {
		if p.Severity == SeverityAlert {
			if alerts == 0 {
				first = p
			}
			alerts++
		}
	}
	if (code != 1 && code != 2) || alerts == 0 {
		return nil, fmt.Errorf("haproxycheck: %s exited with status %d without reporting a configuration error: %q",
			c.bin, code, excerpt(mapTemp(out.String(), aliases)))
	}
	more := ""
	if alerts > 1 {
		more = fmt.Sprintf(" (and %d more alerts)", alerts-1)
	}
	return problems, fmt.Errorf("haproxycheck: %w: %s%s", ErrInvalid, first, more)
}

func severityFor(failed bool) string {
	if failed {
		return SeverityAlert
	}
	return SeverityWarning
}

func excerpt(s string) string {
	s = strings.TrimSpace(s)
	const limit = 512
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}

// bundle is a validated bundle ready to be laid out.
type bundle struct {
	files []File // cleaned paths
	main  string // cleaned path of the main config
	base  string // cleaned base, or "" for no rewriting
}

// prepare validates paths, main and base, and rewrites base in the main config.
func prepare(files []File, main, base string) (*bundle, error) {
	b := &bundle{files: make([]File, 0, len(files))}
	mainClean, err := cleanPath(main)
	if err != nil {
		return nil, fmt.Errorf("haproxycheck: main config: %w", err)
	}
	b.main = mainClean
	if base != "" {
		if !strings.HasPrefix(base, "/") {
			return nil, fmt.Errorf("haproxycheck: %w: base %q is not absolute", ErrBadPath, base)
		}
		base = path.Clean(base)
		if base == "/" {
			return nil, fmt.Errorf("haproxycheck: %w: base must not be the root directory", ErrBadPath)
		}
		b.base = base
	}

	seen := make(map[string]bool, len(files))
	foundMain := false
	for _, f := range files {
		p, err := cleanPath(f.Path)
		if err != nil {
			return nil, fmt.Errorf("haproxycheck: %w", err)
		}
		if seen[p] {
			return nil, fmt.Errorf("haproxycheck: %w: %q appears twice", ErrBadPath, f.Path)
		}
		seen[p] = true
		if p == mainClean {
			foundMain = true
		}
		b.files = append(b.files, File{Path: p, Content: f.Content})
	}
	if !foundMain {
		return nil, fmt.Errorf("haproxycheck: %w: main config %q is not in the bundle", ErrBadPath, main)
	}
	for p := range seen {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if seen[d] {
				return nil, fmt.Errorf("haproxycheck: %w: %q is a file and also the directory of %q", ErrBadPath, d, p)
			}
		}
	}
	return b, nil
}

// layout writes the bundle into dir, rewriting base to dir in the main config.
func (b *bundle) layout(dir string) error {
	for _, f := range b.files {
		full := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			return fmt.Errorf("haproxycheck: laying out bundle: %w", err)
		}
		content := f.Content
		if f.Path == b.main && b.base != "" {
			content = msg.RewriteBase(content, b.base, dir)
		}
		if err := os.WriteFile(full, content, 0o600); err != nil {
			return fmt.Errorf("haproxycheck: laying out bundle: %w", err)
		}
	}
	return nil
}

// cleanPath validates a bundle path and returns its cleaned form.
func cleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%w: empty path", ErrBadPath)
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("%w: %q is absolute; bundle paths are relative to the bundle root", ErrBadPath, p)
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("%w: %q contains a NUL byte", ErrBadPath, p)
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return "", fmt.Errorf("%w: %q has a \"..\" component", ErrBadPath, p)
		}
	}
	c := path.Clean(p)
	if c == "." {
		return "", fmt.Errorf("%w: %q names the bundle root, not a file", ErrBadPath, p)
	}
	return c, nil
}

// checkTempPath refuses temp directories whose path haproxy's tokenizer would
// split or interpret once substituted into the config.
func checkTempPath(dir string) error {
	for _, r := range dir {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@~", r)
		if !ok {
			return fmt.Errorf("haproxycheck: temp dir %q contains %q, which a haproxy config cannot hold unquoted; choose another with WithTempDir", dir, r)
		}
	}
	return nil
}

// cappedBuffer keeps the first max bytes written and counts the rest.
type cappedBuffer struct {
	buf     bytes.Buffer
	max     int
	dropped int64
}

func (w *cappedBuffer) Write(p []byte) (int, error) {
	room := w.max - w.buf.Len()
	if room >= len(p) {
		return w.buf.Write(p)
	}
	if room > 0 {
		w.buf.Write(p[:room])
	} else {
		room = 0
	}
	w.dropped += int64(len(p) - room)
	return len(p), nil
}

func (w *cappedBuffer) Bytes() []byte  { return w.buf.Bytes() }
func (w *cappedBuffer) String() string { return w.buf.String() }

type behindKey struct{}

// Behind marks ctx for checks that nothing waits for (the whole check after
// a provisional acceptance, its bundle deployed already): their haproxy
// runs at BehindNice, so it takes the CPU the checks a deploy waits for
// leave idle.
func Behind(ctx context.Context) context.Context { return context.WithValue(ctx, behindKey{}, true) }

// IsBehind reports whether ctx is marked Behind.
func IsBehind(ctx context.Context) bool { v, _ := ctx.Value(behindKey{}).(bool); return v }

// BehindNice is the nice value of haproxy in a check marked Behind.
const BehindNice = 10
