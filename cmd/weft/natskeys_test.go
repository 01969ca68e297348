package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
)

// TestNATSKeys runs `weft nats-keys` against a real kube-apiserver: the
// first run creates a Secret per role and the authorization block of
// their public keys, which the real nats-server takes (with the
// permissions file) and lets each role in with its seed; a second run keeps
// every key; a role whose Secret is missing gets one and the block follows;
// --rotate replaces one key; a Secret holding no seed is an error, not
// replaced; --write-seed writes a role's seed to a file.
func TestNATSKeys(t *testing.T) {
	k := kubetest.Start(t)
	ctx := context.Background()
	const ns = "weft-system"
	if _, err := k.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secrets := k.Clientset.CoreV1().Secrets(ns)
	keys := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(append([]string{"nats-keys", "--kubeconfig", k.Kubeconfig, "--namespace", ns}, args...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	seeds := func() map[msg.Role]string {
		t.Helper()
		out := map[msg.Role]string{}
		for _, r := range msg.Roles() {
			s, err := secrets.Get(ctx, natsRoleSecret(r), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out[r] = string(s.Data[natsSeedKey])
		}
		return out
	}
	auth := func() string {
		t.Helper()
		s, err := secrets.Get(ctx, natsAuthSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(s.Data[natsAuthKey])
	}
	// usersOf checks that the authorization block has exactly one user
	// per role, the public key of its seed.
	usersOf := func(seeds map[msg.Role]string) {
		t.Helper()
		a := auth()
		for r, seed := range seeds {
			kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(seed)))
			if err != nil {
				t.Fatalf("role %s: %v", r, err)
			}
			pub, _ := kp.PublicKey()
			if n := strings.Count(a, pub); n != 1 || !strings.Contains(a, fmt.Sprintf("{nkey: %q, permissions: $%s", pub, natsauth.PermissionsVar(r))) {
				t.Errorf("the authorization block names %s's key %d times, or not with its permissions:\n%s", r, n, a)
			}
		}
	}

	out, err := keys()
	if err != nil {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	if n := strings.Count(out, ": created"); n != len(msg.Roles())+1 {
		t.Errorf("first run created %d Secrets, want one per role and %s:\n%s", n, natsAuthSecret, out)
	}
	first := seeds()
	usersOf(first)

	// The real server takes the block, which includes the permissions file
	// where the servers mount it, and lets each role in with its seed, and
	// no one with another key.
	dir := t.TempDir()
	root := t.TempDir()
	for _, d := range []string{"config", "auth", "permissions"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "permissions", "permissions.conf"), natsauth.PermissionsConfig())
	writeFile(t, filepath.Join(root, "auth", natsAuthKey), auth())
	port := freeTCPPort(t)
	writeFile(t, filepath.Join(root, "config", "nats.conf"), fmt.Sprintf("listen: \"127.0.0.1:%d\"\ninclude ../auth/%s\n", port, natsAuthKey))
	srv := testkit.StartProcess(t, testkit.NATSServerBinary(t), "-c", filepath.Join(root, "config", "nats.conf"))
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	for _, r := range []msg.Role{msg.RoleRenderer, msg.RoleAuditor, msg.RoleProvisioner} {
		seedFile := filepath.Join(dir, string(r)+".nk")
		writeFile(t, seedFile, first[r])
		opts, err := natsauth.Client{NKey: seedFile}.Options()
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, func() error {
			if done, err := srv.Exited(); done {
				t.Fatalf("nats-server ended: %v\n%s", err, srv.Output())
			}
			nc, err := nats.Connect(url, append(opts, nats.MaxReconnects(0))...)
			if errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("%s is not let in with its Secret's seed: %v", r, err)
			}
			if err != nil {
				return err
			}
			nc.Close()
			return nil
		})
	}
	stranger, _ := nkeys.CreateUser()
	seed, _ := stranger.Seed()
	writeFile(t, filepath.Join(dir, "stranger.nk"), string(seed))
	opts, _ := natsauth.Client{NKey: filepath.Join(dir, "stranger.nk")}.Options()
	if nc, err := nats.Connect(url, append(opts, nats.MaxReconnects(0))...); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("a key of no role: %v, want an authorization violation", err)
	}

	// Run again: every key kept, the block unchanged.
	before := auth()
	if out, err := keys(); err != nil || strings.Contains(out, "created") || !strings.Contains(out, natsAuthSecret+": unchanged") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if fmt.Sprint(seeds()) != fmt.Sprint(first) || auth() != before {
		t.Fatal("a second run changed the keys")
	}

	// A role's Secret missing (a role added by a new version, or deleted):
	// made, the others kept, the block updated.
	if err := secrets.Delete(ctx, natsRoleSecret(msg.RoleSiteLink), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := keys(); err != nil || !strings.Contains(out, natsRoleSecret(msg.RoleSiteLink)+": created") || !strings.Contains(out, natsAuthSecret+": updated") {
		t.Fatalf("run with a role's Secret missing: %v\n%s", err, out)
	}
	third := seeds()
	for r, s := range first {
		if (r == msg.RoleSiteLink) == (third[r] == s) {
			t.Errorf("role %s: key kept %v after its Secret was missing", r, third[r] == s)
		}
	}
	usersOf(third)

	// --rotate: that role's key only.
	if out, err := keys("--rotate", string(msg.RoleRenderer)); err != nil || !strings.Contains(out, natsRoleSecret(msg.RoleRenderer)+": new key") {
		t.Fatalf("--rotate: %v\n%s", err, out)
	}
	fourth := seeds()
	for r, s := range third {
		if (r == msg.RoleRenderer) == (fourth[r] == s) {
			t.Errorf("role %s: key kept %v after --rotate %s", r, fourth[r] == s, msg.RoleRenderer)
		}
	}
	usersOf(fourth)

	// --write-seed
	file := filepath.Join(dir, "provisioner-written.nk")
	if out, err := keys("--write-seed", string(msg.RoleProvisioner)+"="+file); err != nil {
		t.Fatalf("--write-seed: %v\n%s", err, out)
	}
	if got, err := os.ReadFile(file); err != nil || string(got) != fourth[msg.RoleProvisioner] || !strings.HasPrefix(string(got), "SU") {
		t.Fatalf("--write-seed wrote %q (%v), want the provisioner's Secret's seed", got, err)
	}

	// A Secret that holds no seed is reported, and left as it is.
	s, err := secrets.Get(ctx, natsRoleSecret(msg.RoleAuditor), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data[natsSeedKey] = []byte("not a seed")
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := keys(); !errors.Is(err, ErrBadSeed) || !strings.Contains(err.Error(), natsRoleSecret(msg.RoleAuditor)) {
		t.Fatalf("run with a Secret holding no seed: %v, want ErrBadSeed naming it\n%s", err, out)
	}
	if got := seeds()[msg.RoleAuditor]; got != "not a seed" {
		t.Fatalf("the bad Secret was replaced by %q", got)
	}
	if out, err := keys("--rotate", string(msg.RoleAuditor)); err != nil {
		t.Fatalf("--rotate of the bad Secret: %v\n%s", err, out)
	}
}

// TestProvisionWaitsForTheServer: `weft provision` started before its
// NATS server (a Job applied with it) waits for it within --timeout
// instead of failing at once.
func TestProvisionWaitsForTheServer(t *testing.T) {
	port := freeTCPPort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	done := make(chan error, 1)
	var out, errOut bytes.Buffer
	go func() { done <- run([]string{"provision", "--nats-url", url, "--timeout", "2m"}, &out, &errOut) }()
	select {
	case err := <-done:
		t.Fatalf("weft provision ended before its server started: %v\n%s", err, errOut.String())
	case <-time.After(3 * time.Second):
	}
	conf := filepath.Join(t.TempDir(), "nats.conf")
	writeFile(t, conf, fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n}\n", port, t.TempDir()))
	testkit.StartProcess(t, testkit.NATSServerBinary(t), "-c", conf)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("weft provision: %v\n%s", err, errOut.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("weft provision did not end")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(context.Background(), msg.StreamRenders); err != nil {
		t.Fatalf("stream %s after weft provision: %v", msg.StreamRenders, err)
	}
}

// TestNATSKeysCommandLine: -h prints the usage; a role that does not exist
// or a --write-seed without a file is a usage error, before any API call.
func TestNATSKeysCommandLine(t *testing.T) {
	if code, out, errOut := runWeft(t, "nats-keys", "-h"); code != 0 || !strings.Contains(out, "usage: weft nats-keys [flags]") || !strings.Contains(out, "[WEFT_NAMESPACE]") || errOut != "" {
		t.Fatalf("nats-keys -h: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nats-keys", "--rotate", "root"}, "unknown NATS role"},
		{[]string{"nats-keys", "--write-seed", "provisioner"}, "want <role>=<file>"},
		{[]string{"nats-keys", "--write-seed", "root=x.nk"}, "unknown NATS role"},
		{[]string{"nats-keys", "extra"}, "nats-keys takes no arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runWeft(t, tc.args...)
			if code != ExitUsage || !strings.Contains(errOut, tc.want) || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and %q on stderr", code, out, errOut, ExitUsage, tc.want)
			}
		})
	}
}
