package k8s_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/weftio/weft/pkg/testkit"
)

// TestNATSConfig has the real nats-server check the NATS StatefulSet's
// configuration as its pods see it: nats.conf from the ConfigMap at
// /etc/nats/config, the authorization block from the Secret at
// /etc/nats/auth (included by a relative path), and exactly the
// environment the StatefulSet gives the container, so every variable
// the files name ($POD_NAME, each service's password) must be set there.
func TestNATSConfig(t *testing.T) {
	objs := build(t, installations[0])
	find := func(kind, name string) *unstructured.Unstructured {
		t.Helper()
		for _, o := range objs {
			if o.GetKind() == kind && o.GetName() == name {
				return o
			}
		}
		t.Fatalf("%s %s is not in base", kind, name)
		return nil
	}
	sts := typed[appsv1.StatefulSet](t, find("StatefulSet", "weft-nats"))
	cm := typed[corev1.ConfigMap](t, find("ConfigMap", "weft-nats-config"))
	auth := typed[corev1.Secret](t, find("Secret", "weft-nats-auth"))
	c := sts.Spec.Template.Spec.Containers[0]

	root := t.TempDir()
	mounts := map[string]map[string]string{"config": cm.Data, "auth": auth.StringData}
	for _, m := range c.VolumeMounts {
		files, ok := mounts[m.Name]
		if !ok {
			continue
		}
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		delete(mounts, m.Name)
	}
	if len(mounts) > 0 {
		t.Fatalf("the nats container does not mount %v", mounts)
	}
	var conf string
	args := append([]string(nil), c.Args...)
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			conf = filepath.Join(root, args[i+1])
			args[i+1] = conf
		}
	}
	if conf == "" {
		t.Fatalf("the nats container's args %v name no --config", c.Args)
	}
	cmd := exec.Command(testkit.NATSServerBinary(t), append(args, "-t")...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		cmd.Env = append(cmd.Env, e.Name+"=placeholder-"+e.Name)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nats-server refuses %s: %v\n%s", conf, err, out)
	}
}
