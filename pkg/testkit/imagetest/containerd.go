// Package imagetest holds the real container-image parts of tests:
// Containerd, Debian's containerd with its CRI plugin run for one test, and
// Registry, a real OCI registry on loopback with test images. It is a
// package of its own so that the modules whose tests use only testkit do
// not depend on gRPC, the CRI API and go-containerregistry.
package imagetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/weftio/weft/pkg/testkit"
)

// containerdConfig is the configuration of a test's own containerd: every
// path in the test's folders, the CRI plugin with the native snapshotter
// (the only one that works without overlayfs or special file systems),
// no TCP streaming service, and the snapshotters that cannot work here
// disabled so that they do not fill its log.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[5]q
`

// Containerd starts Debian's containerd (`apt-get install containerd`;
// `make deps` installs it) as a process of its own, with its CRI plugin
// and the native snapshotter, its root, state and socket in the test's
// folders, and returns the path of its socket once the CRI ImageService
// answers there. It runs until the test ends (and dies with the test
// process). containerd needs root; without it, or without the program,
// the test ends through Need. Images pulled through it are unpacked, but
// no container can run here.
func Containerd(t testing.TB) string {
	t.Helper()
	bin := testkit.Program(t, "containerd (apt-get install containerd)", "containerd", "/usr/sbin/containerd", "/usr/bin/containerd")
	if os.Geteuid() != 0 {
		testkit.Need(t, "root, which containerd needs", errors.New("the tests do not run as root"))
	}
	dir := t.TempDir()
	// A unix socket's path is limited to 107 bytes: the socket goes to a
	// short folder of its own.
	sockDir, err := os.MkdirTemp("", "ctrd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "containerd.sock")
	cfg := filepath.Join(dir, "config.toml")
	text := fmt.Sprintf(containerdConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, filepath.Join(dir, "opt"), filepath.Join(dir, "cni"))
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := &testkit.SyncBuffer{}
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stop, exited, exitErr := testkit.StartCommand(t, cmd, 15*time.Second)
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("containerd log (last lines):\n%s", testkit.LastLines(out.String(), 40))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-exited:
			t.Fatalf("containerd exited (%v):\n%s", exitErr(), testkit.LastLines(out.String(), 40))
		default:
		}
		err := criAnswers(sock)
		if err == nil {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd's CRI ImageService does not answer on %s within a minute: %v\n%s", sock, err, testkit.LastLines(out.String(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// criAnswers asks the CRI ImageService on sock to list images: it answers
// once the CRI plugin has started.
func criAnswers(sock string) error {
	if _, err := os.Stat(sock); err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{})
	return err
}
