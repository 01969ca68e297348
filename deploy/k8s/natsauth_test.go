package k8s_test

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/weftio/weft/pkg/testkit"
)

// TestNATSCredentials runs the real nats-server on base's authorization
// block (the Secret weft-nats-auth) with the passwords the StatefulSet
// reads from the credential Secrets, and connects as each weft container
// does: with the NATS URL its environment makes (the Secret's user and
// password expanded into WEFT_NATS_URL as the kubelet expands $(VAR)),
// aimed at the weft-nats Service. Each must be let in, and the same user
// with a wrong password must not. Base, and the installation with every
// component (the gate has a user of its own).
func TestNATSCredentials(t *testing.T) {
	for _, in := range installations {
		if in.name == "base" || in.name == "ingress+monitoring+gate" {
			t.Run(in.name, func(t *testing.T) { natsCredentials(t, in) })
		}
	}
}

func natsCredentials(t *testing.T, in installation) {
	objs := build(t, in)
	secrets := map[string]map[string]string{}
	var natsContainer *corev1.Container
	var clients []container
	for _, o := range objs {
		switch o.GetKind() {
		case "Secret":
			secrets[o.GetName()] = typedSecret(t, o).StringData
		}
	}
	for _, w := range workloads(t, objs) {
		for _, c := range w.spec.Spec.Containers {
			if w.name == "weft-nats" {
				natsContainer = &c
				continue
			}
			if hasEnv(c, "WEFT_NATS_URL") {
				clients = append(clients, container{w.kind + " " + w.name, c})
			}
		}
	}
	if natsContainer == nil || len(clients) < 6 {
		t.Fatalf("base has the nats container %v and %d NATS clients: not its layout", natsContainer != nil, len(clients))
	}

	// the server: the authorization block as mounted, the StatefulSet's
	// environment, a client port of the test's own
	root := t.TempDir()
	for _, d := range []string{"config", "auth"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	conf := filepath.Join(root, "config", "test.conf")
	write(t, conf, fmt.Sprintf("listen: 127.0.0.1:%d\ninclude ../auth/auth.conf\n", port))
	write(t, filepath.Join(root, "auth", "auth.conf"), secrets["weft-nats-auth"]["auth.conf"])
	for _, e := range natsContainer.Env {
		t.Setenv(e.Name, envValue(t, e, secrets))
	}
	srv := testkit.StartProcess(t, testkit.NATSServerBinary(t), "-c", conf)
	testkit.Eventually(t, time.Minute, func() error {
		if done, err := srv.Exited(); done {
			t.Fatalf("nats-server ended: %v\n%s", err, srv.Output())
		}
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			_ = c.Close()
		}
		return err
	})

	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			raw := expand(t, c.Container, secrets)
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("WEFT_NATS_URL %q: %v", raw, err)
			}
			if u.Host != "weft-nats.weft-system.svc:4222" {
				t.Fatalf("WEFT_NATS_URL names %s, not the weft-nats Service's client port", u.Host)
			}
			u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			nc, err := nats.Connect(u.String(), nats.MaxReconnects(0))
			if err != nil {
				t.Fatalf("%s is not let in as %s: %v", c.name, u.User.Username(), err)
			}
			nc.Close()
			u.User = url.UserPassword(u.User.Username(), "not-the-password")
			nc, err = nats.Connect(u.String(), nats.MaxReconnects(0))
			if err == nil {
				nc.Close()
				t.Fatalf("user %s is let in with a wrong password", u.User.Username())
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("wrong password: want an authorization violation, got %v", err)
			}
		})
	}
}

type container struct {
	name string
	corev1.Container
}

func typedSecret(t *testing.T, o *unstructured.Unstructured) *corev1.Secret {
	t.Helper()
	return typed[corev1.Secret](t, o)
}

func hasEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// envValue is what the kubelet gives e: its value, or the key of the
// Secret it names (from the build); a field reference is a placeholder.
func envValue(t *testing.T, e corev1.EnvVar, secrets map[string]map[string]string) string {
	t.Helper()
	switch {
	case e.ValueFrom == nil:
		return e.Value
	case e.ValueFrom.SecretKeyRef != nil:
		r := e.ValueFrom.SecretKeyRef
		v, ok := secrets[r.Name][r.Key]
		if !ok {
			t.Fatalf("env %s: Secret %s has no key %s in the build", e.Name, r.Name, r.Key)
		}
		return v
	case e.ValueFrom.FieldRef != nil:
		return "field-" + e.ValueFrom.FieldRef.FieldPath
	}
	t.Fatalf("env %s: an unknown source", e.Name)
	return ""
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand returns c's WEFT_NATS_URL with $(VAR) references to the variables
// defined before it expanded, as the kubelet does.
func expand(t *testing.T, c corev1.Container, secrets map[string]map[string]string) string {
	t.Helper()
	defined := map[string]string{}
	for _, e := range c.Env {
		v := envValue(t, e, secrets)
		v = varRef.ReplaceAllStringFunc(v, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			if d, ok := defined[name]; ok {
				return d
			}
			return ref // the kubelet leaves an unknown reference as it is
		})
		if e.Name == "WEFT_NATS_URL" {
			return v
		}
		defined[e.Name] = v
	}
	t.Fatalf("no WEFT_NATS_URL")
	return ""
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
