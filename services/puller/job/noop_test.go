package job_test

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
)

// buildNoop builds weft-noop as `make build` does (CGO_ENABLED=0,
// -trimpath).
func buildNoop(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "weft-noop")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/weftio/weft/services/puller/cmd/weft-noop")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build weft-noop: %v\n%s", err, out)
	}
	return bin
}

// static says why the ELF file at path would need anything besides itself
// to run: a program interpreter (the dynamic loader) or shared libraries.
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(p.Open())
			return fmt.Errorf("%s has a program interpreter %s", path, bytes.TrimRight(interp, "\x00"))
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	if len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %v", path, libs)
	}
	return nil
}

// TestNoopIsStatic: the built weft-noop has no program interpreter and no
// DT_NEEDED entry; a dynamically linked program (the system's `true`) is
// told apart.
func TestNoopIsStatic(t *testing.T) {
	if err := static(buildNoop(t)); err != nil {
		t.Fatalf("weft-noop is not static: %v", err)
	}
	dynamic := testkit.Program(t, "a dynamically linked program (coreutils' true)", "/bin/true", "/usr/bin/true")
	if err := static(dynamic); err == nil {
		t.Fatalf("%s taken as static", dynamic)
	} else {
		t.Logf("told apart: %v", err)
	}
}

// TestDistrolessJob runs the pull Job's own container commands the way its
// pod runs them, each in a root filesystem of its own through chroot, as
// the Job's user (65532): the init container's in an image holding nothing
// but weft-noop at its path, installing it into the shared emptyDir; then
// the target container's in an image holding nothing at all (scratch) but
// the file the init container wrote to the emptyDir. It exits 0. The same target container with a
// dynamically linked program in the emptyDir fails: a scratch image has no
// dynamic loader.
func TestDistrolessJob(t *testing.T) {
	chroot := testkit.Program(t, "chroot (coreutils)", "chroot", "/usr/sbin/chroot")
	if os.Geteuid() != 0 {
		testkit.Need(t, "root (chroot needs it)", errors.New("not running as root"))
	}
	j, err := builder().Build(context.Background(), job.Input{
		Owner:    owner("web", v1alpha1.ContainerImage{Container: "app", Image: "gcr.io/distroless/static:nonroot"}),
		Node:     &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		Workload: &corev1.PodSpec{},
		Attempt:  1,
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := j.Spec.Template.Spec
	user := strconv.FormatInt(*pod.SecurityContext.RunAsUser, 10) + ":" + strconv.FormatInt(*pod.SecurityContext.RunAsGroup, 10)
	run := func(root string, command []string) ([]byte, error) {
		args := append([]string{"--userspec=" + user, root}, command...)
		cmd := exec.Command(chroot, args...)
		cmd.Env = []string{}
		return cmd.CombinedOutput()
	}
	mountPath := pod.InitContainers[0].VolumeMounts[0].MountPath
	if pod.Containers[0].VolumeMounts[0].MountPath != mountPath {
		t.Fatalf("init container mounts the emptyDir at %s, the target container at %s", mountPath, pod.Containers[0].VolumeMounts[0].MountPath)
	}
	// weft's image: nothing but weft-noop at its path, and the emptyDir
	// (world-writable, as the kubelet makes it) at the mount path.
	helperRoot := t.TempDir()
	helperCmd := pod.InitContainers[0].Command
	place(t, buildNoop(t), filepath.Join(helperRoot, helperCmd[0]))
	emptyDir := filepath.Join(helperRoot, mountPath)
	mkdir(t, emptyDir)
	if err := os.Chmod(emptyDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if out, err := run(helperRoot, helperCmd); err != nil {
		t.Fatalf("init container %v: %v\n%s", helperCmd, err, out)
	}
	// Both containers mount the emptyDir at the same path, so the target's
	// command is where the init container installed it.
	installed := filepath.Join(helperRoot, pod.Containers[0].Command[0])

	// A scratch image: an empty root but for the emptyDir's file, the same
	// file (a hard link) as the init container wrote.
	target := func(t *testing.T, program string) ([]byte, error) {
		root := t.TempDir()
		dst := filepath.Join(root, pod.Containers[0].Command[0])
		mkdir(t, filepath.Dir(dst))
		if err := os.Link(program, dst); err != nil {
			t.Fatal(err)
		}
		return run(root, pod.Containers[0].Command)
	}
	t.Run("static", func(t *testing.T) {
		if out, err := target(t, installed); err != nil {
			t.Fatalf("target container %v: %v\n%s", pod.Containers[0].Command, err, out)
		}
	})
	t.Run("dynamic fails", func(t *testing.T) {
		dynamic := filepath.Join(t.TempDir(), "true")
		place(t, testkit.Program(t, "a dynamically linked program (coreutils' true)", "/bin/true", "/usr/bin/true"), dynamic)
		out, err := target(t, dynamic)
		if err == nil {
			t.Fatalf("a dynamically linked program ran in an empty root:\n%s", out)
		}
		t.Logf("as expected: %v: %s", err, out)
	})
}

// place copies the program src to dst (mode 0555), making its folders.
func place(t *testing.T, src, dst string) {
	t.Helper()
	mkdir(t, filepath.Dir(dst))
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o555); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
