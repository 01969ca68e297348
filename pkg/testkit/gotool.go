package testkit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// CacheDir is weft's own cache of programs built for tests:
// $WEFT_CACHE, else ~/.cache/weft. hack/envtest/build.sh builds the test
// control plane there too.
func CacheDir() string {
	if dir := os.Getenv("WEFT_CACHE"); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "weft")
}

// GoBuild builds the main package pkg (an import path of the workspace,
// such as "github.com/weftio/weft/services/deployer/cmd/weft-deployer")
// into a temporary folder and returns the binary's path. When the test
// binary has the race detector, so does the program. The build cache makes
// a second build take a moment.
func GoBuild(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), path.Base(pkg))
	args := []string{"-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if err := goBuild("", nil, append(args, pkg)...); err != nil {
		t.Fatal(err)
	}
	return bin
}

// GoTool returns the path of the Go tool pkg (the import path of a main
// package that the workspace's tools module requires, as `go tool` runs
// it: "github.com/nats-io/natscli/nats"), built with `go build -o` into a
// folder of CacheDir kept per workspace. Building it explicitly is what
// makes it work on a machine with empty Go caches: there `go tool -n`
// writes "go: downloading" lines before the path, which is a file of the
// build cache that nothing keeps there once the cache is trimmed or
// emptied. A test process builds
// each tool once (the go command takes it from its build cache when nothing
// changed), and one process at a time builds into the folder.
func GoTool(t testing.TB, pkg string) string {
	t.Helper()
	goTools.mu.Lock()
	defer goTools.mu.Unlock()
	if bin, ok := goTools.built[pkg]; ok {
		return bin
	}
	bin, err := goTool(pkg)
	if err != nil {
		t.Fatalf("Go tool %s: %v", pkg, err)
	}
	goTools.built[pkg] = bin
	return bin
}

// goTools are the tools this process built.
var goTools = struct {
	mu    sync.Mutex
	built map[string]string
}{built: map[string]string{}}

func goTool(pkg string) (string, error) {
	root, err := workspaceRoot()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(CacheDir(), "gotools", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Test processes of several packages may build the same tool at once.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	bin := filepath.Join(dir, path.Base(pkg))
	env := []string{"GOWORK=" + filepath.Join(root, "go.work")}
	if err := goBuild(root, env, "-o", bin, pkg); err != nil {
		return "", err
	}
	return bin, nil
}

// workspaceRoot is the folder holding the go.work of the working directory.
func workspaceRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.work in %s or above it", wd)
		}
	}
}

// goBuild runs `go build args...` in dir (empty: the working directory)
// with env added to the environment.
func goBuild(dir string, env []string, args ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build for the tests: %w", err)
	}
	cmd := exec.Command(goBin, append([]string{"build"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", args, err, out)
	}
	return nil
}
