package k8s_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// dockerfile is the repository's Dockerfile, which builds the images the
// manifests run.
const dockerfile = "../../Dockerfile"

// imageBinaries are the programs the Dockerfile builds into
// /usr/local/bin: `-o /out/weft` and the names of the packages its loop
// builds.
func imageBinaries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`-o /out/(weft[a-z-]*) `).FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	for _, m := range regexp.MustCompile(`services/[a-z]+/cmd/(weft-[a-z]+)`).FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestImageHoldsEveryProgram keeps the Dockerfile, the repository's
// programs and the manifests together: the image holds every main package
// of the repository (cmd/weft and each service's cmd/*), and every
// container of every installation that runs weft's image runs one of them
// by its path in the image.
func TestImageHoldsEveryProgram(t *testing.T) {
	built := imageBinaries(t)
	mains, err := filepath.Glob("../../services/*/cmd/*")
	if err != nil {
		t.Fatal(err)
	}
	mains = append(mains, "../../cmd/weft")
	for _, m := range mains {
		if !slices.Contains(built, filepath.Base(m)) {
			t.Errorf("the Dockerfile does not build %s (%s)", filepath.Base(m), m)
		}
	}
	if len(mains) < 7 {
		t.Fatalf("found %d programs: not the repository's layout", len(mains))
	}
	for _, in := range installations {
		for _, w := range workloads(t, build(t, in)) {
			for _, c := range append(slices.Clone(w.spec.Spec.InitContainers), w.spec.Spec.Containers...) {
				if !strings.HasPrefix(c.Image, "ghcr.io/weftio/") {
					continue
				}
				if p := imageProgram(c); !slices.Contains(built, p) {
					t.Errorf("%s: %s %s: container %s runs %q, which the image does not hold (%v)", in.name, w.kind, w.name, c.Name, c.Command, built)
				}
			}
		}
	}
}

// imageProgram is the program of weft's image a container runs: its
// command's /usr/local/bin/<name>.
func imageProgram(c corev1.Container) string {
	if len(c.Command) == 0 {
		return ""
	}
	p, ok := strings.CutPrefix(c.Command[0], "/usr/local/bin/")
	if !ok {
		return ""
	}
	return p
}
