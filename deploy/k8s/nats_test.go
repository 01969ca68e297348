package k8s_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
)

// TestNATSConfig has the real nats-server check the NATS StatefulSet's
// configuration of base and of the site as its pods see it: nats.conf
// from the ConfigMap at /etc/nats/config, the permissions from the
// ConfigMap of deploy/nats and the authorization block from the Secret
// the key Job makes (both included by relative paths), and exactly the
// environment the StatefulSet gives the container, so every variable the
// files name ($POD_NAME, the site's link) must be set there.
func TestNATSConfig(t *testing.T) {
	for _, name := range []string{"base", "site"} {
		t.Run(name, func(t *testing.T) {
			objs := build(t, installationNamed(t, name))
			secrets := generatedKeys(t, jobPermissionsInclude)
			secrets["weft-nats-hub-link"] = map[string]string{"seed": secrets["weft-nats-site-link"]["seed"]}
			root, c := natsRoot(t, objs, secrets)
			conf := natsConfPath(t, root, c)
			cmd := exec.Command(testkit.NATSServerBinary(t), append(append([]string(nil), c.Args...), "-t")...)
			for i, a := range cmd.Args {
				if a == "--config" {
					cmd.Args[i+1] = conf
				}
			}
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			configMaps := configMapsOf(t, objs)
			for _, e := range c.Env {
				cmd.Env = append(cmd.Env, e.Name+"="+envValue(t, e, secrets, configMaps))
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("nats-server refuses %s: %v\n%s", conf, err, out)
			}
			if text := readFile(t, conf); !strings.Contains(text, "include ../auth/auth.conf\n") {
				t.Fatalf("nats.conf does not include weft's users:\n%s", text)
			}
		})
	}
}

// jobPermissionsInclude is where the key Job's authorization block finds
// the permissions (weft nats-keys --permissions-include, by default).
const jobPermissionsInclude = "../permissions/permissions.conf"

// generatedKeys are Secrets shaped as the key Job makes them (weft
// nats-keys: a seed per role, the authorization block including the
// permissions file at include), with keys of the test's own.
func generatedKeys(t *testing.T, include string) map[string]map[string]string {
	t.Helper()
	dir := t.TempDir()
	users, err := natsauth.NKeyUsers(dir, msg.Roles())
	if err != nil {
		t.Fatal(err)
	}
	auth, err := natsauth.AuthorizationConfig(users, include)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{"weft-nats-auth": {"auth.conf": auth}}
	for _, u := range users {
		out["weft-nats-"+string(u.Role)] = map[string]string{"seed": strings.TrimSpace(readFile(t, natsauth.SeedFile(dir, u.Role))), "nkey": u.NKey}
	}
	return out
}
