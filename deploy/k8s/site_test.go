package k8s_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// TestSiteLeafNodeDialsTheHub runs the real nats-server on the site
// overlay's NATS configuration (the ConfigMap and the Secret weft-nats-hub
// as mounted, the StatefulSet's environment) and a hub with base's
// leafnodes block and the password of base's weft-nats-site Secret: the
// leaf node is let in and reaches the hub's JetStream domain, and a wrong
// password is not let in. The leaf connection denies msg.LeafDeny both
// ways.
func TestSiteLeafNodeDialsTheHub(t *testing.T) {
	base, site := build(t, installations[0]), build(t, installationNamed(t, "site"))
	hubCM := typed[corev1.ConfigMap](t, find(t, base, "ConfigMap", "weft-nats-config"))
	leafBlock := regexp.MustCompile(`(?s)\nleafnodes \{\n.*?\n\}\n`).FindString(hubCM.Data["nats.conf"])
	if leafBlock == "" || !strings.Contains(leafBlock, "port: 7422") {
		t.Fatalf("base's nats.conf has no leafnodes block on 7422:\n%s", hubCM.Data["nats.conf"])
	}
	if !strings.Contains(hubCM.Data["nats.conf"], "domain: hub") {
		t.Errorf("base's JetStream is not in the domain hub")
	}
	sitePassword := typed[corev1.Secret](t, find(t, base, "Secret", "weft-nats-site")).StringData["password"]
	hubLeafPort := freePort(t)
	t.Setenv("SITE_PASSWORD", sitePassword)
	hub := testkit.NATSServer(t, fmt.Sprintf("jetstream {\n  store_dir: %q\n  domain: hub\n}\n%s",
		t.TempDir(), strings.Replace(leafBlock, "port: 7422", fmt.Sprintf("listen: \"127.0.0.1:%d\"", hubLeafPort), 1)))

	hubSecret := typed[corev1.Secret](t, find(t, site, "Secret", "weft-nats-hub")).StringData["leafnodes.conf"]
	deny := `["` + strings.Join(msg.LeafDeny, `", "`) + `"]`
	for _, k := range []string{"deny_imports", "deny_exports"} {
		if !strings.Contains(hubSecret, k+": "+deny) {
			t.Errorf("the leaf connection's %s is not %s:\n%s", k, deny, hubSecret)
		}
	}
	if !strings.Contains(hubSecret, "nats-leaf://weft-site:"+sitePassword+"@hub.example.com:7422") {
		t.Fatalf("weft-nats-hub does not dial the hub's leaf port as weft-site with base's password:\n%s", hubSecret)
	}
	for _, tc := range []struct {
		name, password string
		linked         bool
	}{{"right password", sitePassword, true}, {"wrong password", "not-the-password", false}} {
		t.Run(tc.name, func(t *testing.T) {
			leaf := strings.Replace(hubSecret, "weft-site:"+sitePassword+"@hub.example.com:7422", fmt.Sprintf("weft-site:%s@127.0.0.1:%d", tc.password, hubLeafPort), 1)
			url := runSiteNATS(t, site, leaf)
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			hubJS, err := jetstream.NewWithDomain(nc, "hub")
			if err != nil {
				t.Fatal(err)
			}
			if !tc.linked {
				// give the leaf node time to try, then find no hub
				time.Sleep(2 * time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if _, err := hubJS.AccountInfo(ctx); err == nil {
					t.Fatal("the hub answers a leaf node with a wrong password")
				}
				if !strings.Contains(hub.LogText(), `authentication error - User "weft-site"`) {
					t.Errorf("the hub did not refuse the leaf node:\n%s", hub.LogText())
				}
				return
			}
			testkit.Eventually(t, 30*time.Second, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				info, err := hubJS.AccountInfo(ctx)
				if err != nil {
					return fmt.Errorf("the hub's JetStream through the leaf node: %w", err)
				}
				if info.Domain != "hub" {
					return fmt.Errorf("answered by domain %q", info.Domain)
				}
				return nil
			})
		})
	}
}

// runSiteNATS starts nats-server on the site overlay's configuration, with
// leafnodes.conf as the Secret weft-nats-hub's, its own ports and store,
// and the StatefulSet's environment; it returns the deployer's URL.
func runSiteNATS(t *testing.T, site []*unstructured.Unstructured, leafnodes string) string {
	t.Helper()
	sts := typed[appsv1.StatefulSet](t, find(t, site, "StatefulSet", "weft-nats"))
	cm := typed[corev1.ConfigMap](t, find(t, site, "ConfigMap", "weft-nats-config"))
	c := sts.Spec.Template.Spec.Containers[0]
	secrets := map[string]map[string]string{}
	for _, o := range site {
		if o.GetKind() == "Secret" {
			secrets[o.GetName()] = typedSecret(t, o).StringData
		}
	}
	port, mon := freePort(t), freePort(t)
	conf := cm.Data["nats.conf"]
	for old, repl := range map[string]string{
		"port: 4222":                    "port: " + strconv.Itoa(port),
		"http_port: 8222":               "http_port: " + strconv.Itoa(mon),
		"store_dir: /data/jetstream":    fmt.Sprintf("store_dir: %q", t.TempDir()),
		"include ../hub/leafnodes.conf": "include ../hub/leafnodes.conf",
	} {
		if !strings.Contains(conf, old) {
			t.Fatalf("the site's nats.conf has no %q:\n%s", old, conf)
		}
		conf = strings.Replace(conf, old, repl, 1)
	}
	conf = strings.Replace(conf, "\nport: "+strconv.Itoa(port), "\nlisten: 127.0.0.1:"+strconv.Itoa(port), 1)
	root := t.TempDir()
	for dir, files := range map[string]map[string]string{"config": {"nats.conf": conf}, "hub": {"leafnodes.conf": leafnodes}} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range files {
			write(t, filepath.Join(root, dir, name), text)
		}
	}
	for _, e := range c.Env {
		t.Setenv(e.Name, envValue(t, e, secrets))
	}
	srv := testkit.StartProcess(t, testkit.NATSServerBinary(t), "-c", filepath.Join(root, "config", "nats.conf"))
	url := fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", secrets["weft-nats-deployer"]["user"], secrets["weft-nats-deployer"]["password"], port)
	testkit.Eventually(t, time.Minute, func() error {
		if done, err := srv.Exited(); done {
			t.Fatalf("nats-server ended: %v\n%s", err, srv.Output())
		}
		nc, err := nats.Connect(url, nats.MaxReconnects(0))
		if err != nil {
			return err
		}
		nc.Close()
		return nil
	})
	return url
}

func installationNamed(t *testing.T, name string) installation {
	t.Helper()
	for _, in := range installations {
		if in.name == name {
			return in
		}
	}
	t.Fatalf("no installation %s", name)
	return installation{}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("%s %s is not in the build", kind, name)
	return nil
}
