package k8s_test

import (
	"context"
	"fmt"
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

// TestSiteLeafNodeDialsTheHub runs a hub with base's leafnodes block,
// permissions and users (keys as the hub's Job makes them), and the real
// nats-server on the site overlay's NATS configuration (ConfigMaps and the
// site's own keys as mounted, the StatefulSet's environment, the hub's
// site-link seed as the Secret weft-nats-hub-link, the hub's leaf address
// for weft-site-hub's). With the hub's seed the link is let in as the
// site-link user and carries JetStream's sourcing both ways: the hub,
// provisioned for its site by the hub's provisioner, and the leaf node,
// provisioned for the site by the site's provisioner (as the Jobs do),
// exchange a validation status and a deploy status, the latter written and
// the former read by the site's deployer. With another
// key (the site's own site-link key) the hub refuses the link and nothing
// crosses. The link denies msg.LeafDeny both ways.
func TestSiteLeafNodeDialsTheHub(t *testing.T) {
	base, site := build(t, installations[0]), build(t, installationNamed(t, "site"))
	hubConf := typed[corev1.ConfigMap](t, find(t, base, "ConfigMap", "weft-nats-config")).Data["nats.conf"]
	leafBlock := regexp.MustCompile(`(?s)\nleafnodes \{\n.*?\n\}\n`).FindString(hubConf)
	if leafBlock == "" || !strings.Contains(leafBlock, "port: 7422") {
		t.Fatalf("base's nats.conf has no leafnodes block on 7422:\n%s", hubConf)
	}
	if strings.Contains(leafBlock, "authorization") {
		t.Fatalf("base's leafnodes block has an authorization of its own: the site-link user's permissions would not apply:\n%s", leafBlock)
	}
	if !strings.Contains(hubConf, "domain: hub") {
		t.Errorf("base's JetStream is not in the domain hub")
	}
	siteConf := typed[corev1.ConfigMap](t, find(t, site, "ConfigMap", "weft-nats-config")).Data["nats.conf"]
	deny := `["` + strings.Join(msg.LeafDeny, `", "`) + `"]`
	for _, k := range []string{"deny_imports", "deny_exports"} {
		if !strings.Contains(siteConf, k+": "+deny) {
			t.Errorf("the leaf connection's %s is not %s:\n%s", k, deny, siteConf)
		}
	}
	hubURL := configMapsOf(t, site)[volumeConfigMap(t, site, "HUB_URL")]["url"]
	if !strings.HasPrefix(hubURL, "nats-leaf://") || !strings.HasSuffix(hubURL, ":7422") {
		t.Fatalf("the site dials %q, not a hub's leaf-node port", hubURL)
	}

	// the hub's block in the hub's one file, after the permissions
	hubKeys, siteKeys := generatedKeys(t, ""), generatedKeys(t, jobPermissionsInclude)
	perms := configMapsOf(t, base)[volumeConfigMapOf(t, base, "permissions")]["permissions.conf"]
	hubLeafPort := testkit.FreePort(t)
	hub := testkit.NATSServer(t, fmt.Sprintf("jetstream {\n  store_dir: %q\n  domain: hub\n}\n%s\n%s\n%s",
		t.TempDir(), strings.Replace(leafBlock, "port: 7422", fmt.Sprintf("listen: \"127.0.0.1:%d\"", hubLeafPort), 1), perms, hubKeys["weft-nats-auth"]["auth.conf"]))
	dir := t.TempDir()
	seedFile := func(keys map[string]map[string]string, role msg.Role, name string) string {
		file := filepath.Join(dir, name+"-"+string(role)+".nk")
		write(t, file, keys["weft-nats-"+string(role)]["seed"])
		return file
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// the hub's Job provisions it for its site with the provisioner's key
	if err := msg.Provision(ctx, jsOf(t, connectNKey(t, hub.URL, seedFile(hubKeys, msg.RoleProvisioner, "hub"))), 1, msg.WithSites("edge-1")); err != nil {
		t.Fatal(err)
	}
	hubJS := jsOf(t, connectNKey(t, hub.URL, seedFile(hubKeys, msg.RoleAdmin, "hub")))
	hubKV, err := hubJS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, seed string
		linked     bool
	}{
		{"the hub's site-link key", hubKeys["weft-nats-site-link"]["seed"], true},
		{"another key", siteKeys["weft-nats-site-link"]["seed"], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := testkit.FreePort(t)
			secrets := map[string]map[string]string{"weft-nats-hub-link": {"seed": tc.seed}}
			for k, v := range siteKeys {
				secrets[k] = v
			}
			srv := runNATS(t, site, secrets, map[string]string{
				"port: 4222":      "listen: 127.0.0.1:" + strconv.Itoa(port),
				"http_port: 8222": "http_port: " + strconv.Itoa(testkit.FreePort(t)),
			}, map[string]string{"HUB_URL": fmt.Sprintf("nats-leaf://127.0.0.1:%d", hubLeafPort)})
			url := fmt.Sprintf("nats://127.0.0.1:%d", port)
			testkit.Eventually(t, time.Minute, func() error {
				if done, err := srv.Exited(); done {
					t.Fatalf("nats-server ended: %v\n%s", err, srv.Output())
				}
				nc, err := nats.Connect(url, nats.MaxReconnects(0))
				if err == nil {
					nc.Close()
				}
				if err != nil && !strings.Contains(err.Error(), "Authorization") {
					return err
				}
				return nil
			})
			// the site's Job provisions the leaf node for its site; its
			// deployer writes and reads there
			siteJS := jsOf(t, connectNKey(t, url, seedFile(siteKeys, msg.RoleProvisioner, "site")))
			if err := msg.Provision(ctx, siteJS, 1, msg.AtSite("edge-1", msg.DefaultHubDomain, []string{"edge"})); err != nil {
				t.Fatal(err)
			}
			deployer := jsOf(t, connectNKey(t, url, seedFile(siteKeys, msg.RoleDeployer, "site")))
			siteKV, err := deployer.KeyValue(ctx, msg.BucketStatus)
			if err != nil {
				t.Fatal(err)
			}
			want := "accepted by " + tc.name
			if _, err := hubKV.Put(ctx, msg.ValidationStatusKey("edge"), []byte(want)); err != nil {
				t.Fatal(err)
			}
			if _, err := siteKV.Put(ctx, msg.DeployStatusKey("edge", "lb-1"), []byte(want)); err != nil {
				t.Fatal(err)
			}
			crossed := func() error {
				if e, err := siteKV.Get(ctx, msg.ValidationStatusKey("edge")); err != nil || string(e.Value()) != want {
					return fmt.Errorf("the site's copy of the hub's validation status: %v", err)
				}
				if e, err := hubKV.Get(ctx, msg.DeployStatusKey("edge", "lb-1")); err != nil || string(e.Value()) != want {
					return fmt.Errorf("the hub's copy of the site's deploy status: %v", err)
				}
				return nil
			}
			if tc.linked {
				testkit.Eventually(t, time.Minute, crossed)
				return
			}
			testkit.Eventually(t, time.Minute, func() error {
				if !strings.Contains(hub.LogText(), "authentication error") {
					return fmt.Errorf("the hub has not refused the leaf node yet")
				}
				return nil
			})
			time.Sleep(2 * time.Second) // the sources' time to cross, were the link up
			if err := crossed(); err == nil {
				t.Fatal("statuses crossed a link the hub refused")
			}
		})
	}
}

// volumeConfigMap is the ConfigMap the environment variable env of the
// build's NATS container reads.
func volumeConfigMap(t *testing.T, objs []*unstructured.Unstructured, env string) string {
	t.Helper()
	sts := typed[appsv1.StatefulSet](t, find(t, objs, "StatefulSet", "weft-nats"))
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name == env && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			return e.ValueFrom.ConfigMapKeyRef.Name
		}
	}
	t.Fatalf("the NATS container reads no ConfigMap into %s", env)
	return ""
}

// volumeConfigMapOf is the ConfigMap of the build's NATS pods' volume.
func volumeConfigMapOf(t *testing.T, objs []*unstructured.Unstructured, vol string) string {
	t.Helper()
	sts := typed[appsv1.StatefulSet](t, find(t, objs, "StatefulSet", "weft-nats"))
	if v := volume(sts.Spec.Template.Spec.Volumes, vol); v != nil && v.ConfigMap != nil {
		return v.ConfigMap.Name
	}
	t.Fatalf("the NATS pods have no ConfigMap volume %s", vol)
	return ""
}

func jsOf(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
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
