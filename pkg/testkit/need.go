package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CIEnv is the environment variable that CI systems set to "true"; `.ci/run`
// sets it too. Under it every real part a test uses must be there.
const CIEnv = "CI"

// InCI reports whether the tests run under CI ($CI is "true").
func InCI() bool { return os.Getenv(CIEnv) == "true" }

// Need ends the test when err says that a real part it uses is missing (a
// program such as haproxy or redis-server, Python's Jinja2, the test
// control plane): on a person's machine the test is skipped, saying what is
// missing and how to get it; under CI (InCI) it fails, because there a
// missing part is a broken machine, not a reason to test less. what names
// the part and how to get it, e.g. "haproxy (apt-get install haproxy)".
// A nil err does nothing.
func Need(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if InCI() {
		tb.Fatalf("%s is missing, and under %s=true every real part must be there: %v; `make deps` installs it", what, CIEnv, err)
	}
	tb.Skipf("%s is missing: %v; `make deps` installs it (under %s=true this fails)", what, err, CIEnv)
}

// Want is Need for a real part that only some checks of a test use: when
// err is not nil, it fails the test under CI, and elsewhere logs what is
// missing and returns false so that the test goes on without those checks.
func Want(tb testing.TB, what string, err error) bool {
	tb.Helper()
	if err == nil {
		return true
	}
	if InCI() {
		tb.Fatalf("%s is missing, and under %s=true every real part must be there: %v; `make deps` installs it", what, CIEnv, err)
	}
	tb.Logf("%s is missing, so it is not checked: %v; `make deps` installs it", what, err)
	return false
}

// ErrNotFound is the error Program passes to Need when no candidate is an
// executable.
var ErrNotFound = errors.New("not found")

// Program returns the absolute path of the first of candidates that is an
// executable (a bare name is looked up on PATH), or ends the test through
// Need naming what.
func Program(tb testing.TB, what string, candidates ...string) string {
	tb.Helper()
	p, err := lookProgram(candidates...)
	Need(tb, what, err)
	return p
}

func lookProgram(candidates ...string) (string, error) {
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: looked for %s", ErrNotFound, strings.Join(candidates, ", "))
}

// HAProxy returns the path of the haproxy binary (on PATH, or Debian's
// /usr/sbin/haproxy), or ends the test through Need.
func HAProxy(tb testing.TB) string {
	tb.Helper()
	return Program(tb, "haproxy (apt-get install haproxy)", "haproxy", "/usr/sbin/haproxy")
}
