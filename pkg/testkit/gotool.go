package testkit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
// and returns the binary's path. When the test binary has the race
// detector, so does the program. The binary is built into a folder of
// CacheDir kept per workspace, package and race mode, where the go command
// leaves a binary that is up to date as it is: a second build, in this
// process or another, costs a check instead of a link (tens of seconds of
// CPU for a binary with the race detector). Callers must not change the
// file.
func GoBuild(t testing.TB, pkg string) string {
	t.Helper()
	mode := "plain"
	// No version control stamp: the same program built through `make run`
	// (GoFlags) is then found up to date in GoBuild's file, whatever the
	// state of the checkout.
	args := []string{"-buildvcs=false"}
	if raceEnabled {
		mode = "race"
		args = append(args, "-race")
	}
	bin, err := buildInto(path.Join(mode, pkg), append(args, pkg)...)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// GoFlags is GOFLAGS for a build of a weft program that a test starts
// another way than GoBuild (`make run`): the GOFLAGS GoBuild's own go
// command has (`go env GOFLAGS`: the environment's, else `go env -w`'s,
// which a GOFLAGS set for a command would replace), -race when the test
// binary has the race detector, so the build uses the packages compiled
// for the tests instead of compiling them all again, and -buildvcs=false,
// as GoBuild builds: the same program built into GoBuild's file is then
// found up to date there instead of linked again.
func GoFlags() string {
	flags := os.Getenv("GOFLAGS")
	if out, err := exec.Command("go", "env", "GOFLAGS").Output(); err == nil {
		flags = strings.TrimSpace(string(out))
	}
	if raceEnabled {
		flags += " -race"
	}
	return strings.TrimSpace(flags + " -buildvcs=false")
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
// changed), and one process at a time builds into the folder. Unlike
// GoBuild, never with the race detector: the NATS CLI built with it
// exited 1 after doing its work ("nats pub", "nats req"), once it had
// printed "Connection is closed", with no race reported.
func GoTool(t testing.TB, pkg string) string {
	t.Helper()
	goTools.mu.Lock()
	defer goTools.mu.Unlock()
	if bin, ok := goTools.built[pkg]; ok {
		return bin
	}
	bin, err := buildInto(path.Join("tool", pkg), pkg)
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

// buildInto runs `go build -o <bin> args...` in the workspace's root, with
// the workspace's go.work, where bin is a file of a folder of CacheDir
// named after the workspace and key (base: key's last element), and
// returns bin. Test processes of several packages may build the same
// program at once: one at a time builds into a folder.
func buildInto(key string, args ...string) (string, error) {
	root, err := workspaceRoot()
	if err != nil {
		return "", err
	}
	ws := sha256.Sum256([]byte(root))
	k := sha256.Sum256([]byte(key))
	builds := filepath.Join(CacheDir(), "gobuild")
	wsDir := filepath.Join(builds, hex.EncodeToString(ws[:6]))
	dir := filepath.Join(wsDir, hex.EncodeToString(k[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	now := time.Now()
	_ = os.Chtimes(wsDir, now, now) // in use: kept by pruneBuilds
	pruneBuilds(builds, now.Add(-buildsKept))
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	bin := filepath.Join(dir, path.Base(key))
	env := []string{"GOWORK=" + filepath.Join(root, "go.work")}
	if err := goBuild(root, env, append([]string{"-o", bin}, args...)...); err != nil {
		return "", err
	}
	return bin, nil
}

// buildsKept is how long the programs built for the tests of a workspace
// are kept after their last use: a folder of a removed checkout does not
// stay for ever (a program with the race detector is 100 MB or more).
const buildsKept = 7 * 24 * time.Hour

// pruneBuilds removes the folders of builds whose workspace last used them
// before cutoff, as far as it can.
func pruneBuilds(builds string, cutoff time.Time) {
	entries, err := os.ReadDir(builds)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() && info.ModTime().Before(cutoff) {
			_ = os.RemoveAll(filepath.Join(builds, e.Name()))
		}
	}
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
