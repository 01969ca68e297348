package k8s_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/testkit"
)

// TestContainersUseKnownSettings runs each program of weft's image that a
// container runs, with the container's subcommand and -h, and checks that
// every flag the container passes and every WEFT_* variable it sets is one
// the program reads: a misspelt setting would be ignored without a word
// and leave the default (a --listen on 127.0.0.1 fails every probe).
func TestContainersUseKnownSettings(t *testing.T) {
	usages := map[string]string{}
	bins := map[string]string{}
	top := t // binaries live in its temporary folder, for every subtest
	usage := func(t *testing.T, prog string, sub []string) string {
		t.Helper()
		key := strings.Join(append([]string{prog}, sub...), " ")
		if u, ok := usages[key]; ok {
			return u
		}
		bin, ok := bins[prog]
		if !ok {
			bin = testkit.GoBuild(top, programPackage(t, prog))
			bins[prog] = bin
		}
		// -h prints the usage; the exit status says nothing here
		out, err := exec.Command(bin, append(sub, "-h")...).CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("run %s: %v", bin, err)
		}
		usages[key] = string(out)
		return string(out)
	}
	checked := 0
	for _, in := range installations {
		for _, w := range workloads(t, build(t, in)) {
			for _, c := range append(w.spec.Spec.InitContainers, w.spec.Spec.Containers...) {
				prog := imageProgram(c)
				if prog == "" {
					continue
				}
				t.Run(in.name+"/"+w.name+"/"+c.Name, func(t *testing.T) {
					var sub, flags []string
					for _, a := range c.Command[1:] {
						if strings.HasPrefix(a, "-") {
							flags = append(flags, a)
						} else if len(flags) == 0 {
							sub = append(sub, a)
						}
					}
					u := usage(t, prog, sub)
					if strings.Contains(u, "unknown command") {
						t.Skipf("%s %s is not a command of this tree yet:\n%s", prog, strings.Join(sub, " "), u)
					}
					for _, f := range append(flags, c.Args...) {
						name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
						if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(name) + `\b`).MatchString(u) {
							t.Errorf("%s %s has no flag %q; its usage:\n%s", prog, strings.Join(sub, " "), f, u)
						}
					}
					for _, e := range c.Env {
						if strings.HasPrefix(e.Name, "WEFT_") && !strings.Contains(u, "["+e.Name+"]") {
							t.Errorf("%s %s does not read %s; its usage:\n%s", prog, strings.Join(sub, " "), e.Name, u)
						}
					}
					checked++
				})
			}
		}
	}
	if checked < 6 {
		t.Fatalf("checked %d containers: fewer than the services", checked)
	}
}

// programPackage is the import path of the main package of prog.
func programPackage(t *testing.T, prog string) string {
	t.Helper()
	if prog == "weft" {
		return "github.com/weftio/weft/cmd/weft"
	}
	dirs, err := filepath.Glob("../../services/*/cmd/" + prog)
	if err != nil || len(dirs) != 1 {
		t.Fatalf("the package of %s: %v %v", prog, dirs, err)
	}
	rel, err := filepath.Rel("../..", dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	return "github.com/weftio/weft/" + filepath.ToSlash(rel)
}
