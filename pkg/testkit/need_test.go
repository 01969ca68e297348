package testkit_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/testkit"
)

// needCase, set in the environment, makes TestNeedHelperProcess run one
// case of TestNeed in a test process of its own, where a skip or a failure
// is what the process reports.
const needCase = "WEFT_TESTKIT_NEED_CASE"

var errGone = errors.New("frobnicator gone")

// TestNeedHelperProcess is one case of TestNeed; on its own it does
// nothing.
func TestNeedHelperProcess(t *testing.T) {
	switch os.Getenv(needCase) {
	case "":
		return
	case "need-nil":
		testkit.Need(t, "frobnicator (apt-get install frob)", nil)
	case "need":
		testkit.Need(t, "frobnicator (apt-get install frob)", errGone)
	case "want":
		if testkit.Want(t, "frobnicator (apt-get install frob)", errGone) {
			t.Error("Want returned true for a missing part")
		}
	case "want-nil":
		if !testkit.Want(t, "frobnicator (apt-get install frob)", nil) {
			t.Error("Want returned false for a part that is there")
		}
	case "program-missing":
		testkit.Program(t, "frobnicator (apt-get install frob)", "weft-no-such-program", "/nonexistent/frob")
	case "program":
		if p := testkit.Program(t, "a shell", "weft-no-such-program", "sh"); !filepath.IsAbs(p) {
			t.Errorf("Program returned %q, want an absolute path", p)
		}
	}
	t.Log("went on after the check")
}

// TestNeed runs each case in a test process of its own, with and without
// CI=true, and reads what the process reported: a missing part skips the
// test on a person's machine and fails it under CI, saying what is missing
// and how to get it.
func TestNeed(t *testing.T) {
	const wentOn = "went on after the check"
	cases := []struct {
		name, ci string
		result   string   // --- PASS, --- SKIP or --- FAIL
		says     []string // in the output
		silent   []string // not in the output
	}{
		{"need-nil", "", "--- PASS", []string{wentOn}, nil},
		{"need-nil", "true", "--- PASS", []string{wentOn}, nil},
		{"need", "", "--- SKIP", []string{"frobnicator (apt-get install frob) is missing: frobnicator gone", "make deps"}, []string{wentOn}},
		{"need", "false", "--- SKIP", []string{"frobnicator gone"}, []string{wentOn}},
		{"need", "true", "--- FAIL", []string{"frobnicator (apt-get install frob) is missing", "CI=true", "frobnicator gone", "make deps"}, []string{wentOn}},
		{"want", "", "--- PASS", []string{"frobnicator (apt-get install frob) is missing, so it is not checked: frobnicator gone", wentOn}, nil},
		{"want", "true", "--- FAIL", []string{"CI=true", "frobnicator gone"}, []string{wentOn}},
		{"want-nil", "true", "--- PASS", []string{wentOn}, []string{"missing"}},
		{"program-missing", "", "--- SKIP", []string{"looked for weft-no-such-program, /nonexistent/frob"}, []string{wentOn}},
		{"program-missing", "true", "--- FAIL", []string{"looked for weft-no-such-program, /nonexistent/frob"}, []string{wentOn}},
		{"program", "true", "--- PASS", []string{wentOn}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name+"/CI="+tc.ci, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNeedHelperProcess$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), needCase+"="+tc.name, testkit.CIEnv+"="+tc.ci)
			out, err := cmd.CombinedOutput()
			text := string(out)
			if failed := err != nil; failed != (tc.result == "--- FAIL") {
				t.Errorf("exit: %v, want the process to fail: %v", err, tc.result == "--- FAIL")
			}
			if !strings.Contains(text, tc.result+": TestNeedHelperProcess") {
				t.Errorf("output lacks %q", tc.result)
			}
			for _, s := range tc.says {
				if !strings.Contains(text, s) {
					t.Errorf("output lacks %q", s)
				}
			}
			for _, s := range tc.silent {
				if strings.Contains(text, s) {
					t.Errorf("output has %q", s)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", text)
			}
		})
	}
}

// TestGoTool builds the NATS CLI from the workspace's tools module into
// weft's cache and runs it; the process builds it once.
func TestGoTool(t *testing.T) {
	bin := testkit.GoTool(t, "github.com/nats-io/natscli/nats")
	if !strings.HasPrefix(bin, testkit.CacheDir()+string(filepath.Separator)) {
		t.Errorf("built %s, not in %s", bin, testkit.CacheDir())
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "v") {
		t.Fatalf("%s --version: %v: %s", bin, err, out)
	}
	if again := testkit.GoTool(t, "github.com/nats-io/natscli/nats"); again != bin {
		t.Errorf("second call gave %s, first %s", again, bin)
	}
}
