package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
)

// TestNATSCredentials runs the key Job of base and of the installation
// with every component on a real kube-apiserver as its ServiceAccount
// does (its init container's command, the weft binary, with only the
// rights of its Role): it makes a Secret per role and the authorization
// block; run again, it keeps every key. Then the real nats-server runs the
// NATS StatefulSet's configuration as its pods see it (the ConfigMaps and
// the Job's Secret as mounted, the StatefulSet's environment), and every
// container connects as it would: its NATS URL, the seed file of its
// role's Secret as mounted (the Job's provisioner seed from its emptyDir).
// Each is let in; each service runs with --provision=false; a key of no
// role is not let in; the watcher's user may not publish a deploy order or
// write another service's status, the renderer's may not write watched
// objects, the auditor's publishes nothing, the site link's user is no
// client.
func TestNATSCredentials(t *testing.T) {
	a := startAPIServer(t)
	bin := testkit.GoBuild(t, "github.com/weftio/weft/cmd/weft")
	for _, in := range installations {
		if in.name == "base" || in.name == "ingress+monitoring+gate" {
			t.Run(in.name, func(t *testing.T) { natsCredentials(t, a, bin, in) })
		}
	}
}

func natsCredentials(t *testing.T, a *apiServer, bin string, in installation) {
	objs := build(t, in)
	a.applyRBAC(t, objs)
	job := a.runKeyJob(t, bin, objs)
	again := a.runKeyJob(t, bin, objs)
	if !maps.EqualFunc(job.secrets, again.secrets, maps.Equal) {
		t.Fatal("the key Job's second run changed the Secrets")
	}
	if strings.Contains(again.output, "created") {
		t.Fatalf("the key Job's second run created Secrets:\n%s", again.output)
	}

	port := testkit.FreePort(t)
	srv := runNATS(t, objs, job.secrets, map[string]string{
		"port: 4222":      "listen: 127.0.0.1:" + strconv.Itoa(port),
		"port: 7422":      "listen: 127.0.0.1:" + strconv.Itoa(testkit.FreePort(t)),
		"port: 6222":      "listen: 127.0.0.1:" + strconv.Itoa(testkit.FreePort(t)),
		"http_port: 8222": "http_port: " + strconv.Itoa(testkit.FreePort(t)),
	}, nil)
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
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	dir := t.TempDir()

	var clients int
	for _, w := range workloads(t, objs) {
		for _, c := range append(slices.Clone(w.spec.Spec.InitContainers), w.spec.Spec.Containers...) {
			if !hasEnv(c, "WEFT_NATS_URL") {
				continue
			}
			clients++
			t.Run(w.kind+" "+w.name+"/"+c.Name, func(t *testing.T) {
				env := map[string]string{}
				for _, e := range c.Env {
					env[e.Name] = envValue(t, e, job.secrets, nil)
				}
				if env["WEFT_NATS_URL"] != "nats://weft-nats.weft-system.svc:4222" {
					t.Fatalf("WEFT_NATS_URL %q is not the weft-nats Service's client port", env["WEFT_NATS_URL"])
				}
				if w.kind != "Job" && env["WEFT_PROVISION"] != "false" {
					t.Errorf("WEFT_PROVISION is %q: its user may not provision, the Job does", env["WEFT_PROVISION"])
				}
				seed := mountedFile(t, w.spec.Spec, c, env["WEFT_NATS_NKEY"], job)
				file := filepath.Join(dir, w.name+"-"+c.Name+".nk")
				write(t, file, seed)
				nc := connectNKey(t, url, file)
				nc.Close()
			})
		}
	}
	if clients < 7 {
		t.Fatalf("%d containers connect to NATS: fewer than the services and the Job", clients)
	}

	seedOf := func(role msg.Role) string {
		t.Helper()
		file := filepath.Join(dir, string(role)+".nk")
		write(t, file, job.secrets["weft-nats-"+string(role)]["seed"])
		return file
	}
	for _, tc := range []struct {
		role     msg.Role
		subjects []string
	}{
		{msg.RoleWatcher, []string{msg.DeploySubject("edge", "main"), msg.StatusSubject(msg.DeployStatusKey("edge", "main")), msg.StatusSubject(msg.RenderStatusKey("edge"))}},
		{msg.RoleRenderer, []string{msg.ResourceSubject(msg.ResourceKey("cluster", "services", "shop", "web")), msg.ValidatedSubject("edge")}},
		{msg.RoleAuditor, []string{msg.RenderSubject("edge"), msg.ChangeSubject("cluster", "services"), msg.StatusSubject(msg.SyncStatusKey("cluster", "services")), msg.TriggerDeploySubject("edge")}},
	} {
		for _, subject := range tc.subjects {
			t.Run(string(tc.role)+" may not publish "+subject, func(t *testing.T) {
				publishRefused(t, url, seedOf(tc.role), subject)
			})
		}
	}
	t.Run("a key of no role is not let in", func(t *testing.T) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		file := filepath.Join(dir, "stranger.nk")
		write(t, file, string(seed))
		notLetIn(t, url, file)
	})
	t.Run("the site link's user is no client", func(t *testing.T) {
		notLetIn(t, url, seedOf(msg.RoleSiteLink))
	})
}

// keyJob is what the key Job made: the Secrets (name, key, value) and the
// files its --write-seed flags wrote (path in the pod -> the test's copy).
type keyJob struct {
	secrets map[string]map[string]string
	written map[string]string
	output  string
}

// runKeyJob runs the init container of the build's Job weft-nats-setup
// that makes the keys (weft nats-keys) with bin, as the Job's
// ServiceAccount, with its environment, and returns the Secrets it made
// (madeAtInstall) as the API server has them.
func (a *apiServer) runKeyJob(t *testing.T, bin string, objs []*unstructured.Unstructured) keyJob {
	t.Helper()
	var spec *corev1.PodSpec
	var c *corev1.Container
	for _, w := range workloads(t, objs) {
		for i, ic := range w.spec.Spec.InitContainers {
			if w.kind == "Job" && len(ic.Command) > 1 && ic.Command[1] == "nats-keys" {
				spec, c = &w.spec.Spec, &w.spec.Spec.InitContainers[i]
			}
		}
	}
	if c == nil || imageProgram(*c) != "weft" {
		t.Fatal("the build has no Job running weft nats-keys")
	}
	out := keyJob{secrets: map[string]map[string]string{}, written: map[string]string{}}
	dir := t.TempDir()
	var args []string
	for _, arg := range c.Command[1:] {
		if v, ok := strings.CutPrefix(arg, "--write-seed="); ok {
			role, path, _ := strings.Cut(v, "=")
			out.written[path] = filepath.Join(dir, string(role)+".nk")
			arg = "--write-seed=" + role + "=" + out.written[path]
		}
		args = append(args, arg)
	}
	cmd := exec.Command(bin, append(args, "--kubeconfig", a.kubeconfigAs(t, spec.ServiceAccountName))...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			v = namespace
		}
		cmd.Env = append(cmd.Env, e.Name+"="+v)
	}
	b, err := cmd.CombinedOutput()
	out.output = string(b)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(c.Command, " "), err, b)
	}
	for name := range madeAtInstall(t, objs) {
		s, err := a.Clientset.CoreV1().Secrets(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Secret %s after the key Job: %v", name, err)
		}
		out.secrets[name] = map[string]string{}
		for k, v := range s.Data {
			out.secrets[name][k] = string(v)
		}
	}
	return out
}

// kubeconfigAs writes a kubeconfig that authenticates as the
// administrator and impersonates ServiceAccount sa of weft-system, so a
// program run with it has exactly sa's rights.
func (a *apiServer) kubeconfigAs(t *testing.T, sa string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: a.Config.Host, CertificateAuthorityData: a.Config.CAData}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: a.Config.CertData, ClientKeyData: a.Config.KeyData,
		Impersonate:       "system:serviceaccount:" + namespace + ":" + sa,
		ImpersonateGroups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "sa"}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// mountedFile is the content container c of pod spec finds at path: a
// key of the Secret or ConfigMap mounted there (items honoured), or what
// the key Job wrote there.
func mountedFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, path string, job keyJob) string {
	t.Helper()
	if path == "" {
		t.Fatal("no WEFT_NATS_NKEY")
	}
	if w, ok := job.written[path]; ok {
		data, err := os.ReadFile(w)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		v := volume(spec.Volumes, m.Name)
		if v == nil || v.Secret == nil {
			t.Fatalf("%s is mounted from volume %s, which is no Secret", path, m.Name)
		}
		key := rel
		for _, it := range v.Secret.Items {
			if it.Path == rel {
				key = it.Key
			}
		}
		data, ok := job.secrets[v.Secret.SecretName][key]
		if !ok {
			t.Fatalf("%s: Secret %s has no key %s", path, v.Secret.SecretName, key)
		}
		return data
	}
	t.Fatalf("no volume is mounted at %s", path)
	return ""
}

func connectNKey(t *testing.T, url, seedFile string, more ...nats.Option) *nats.Conn {
	t.Helper()
	opts, err := natsauth.Client{NKey: seedFile}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, append(append(opts, nats.MaxReconnects(0)), more...)...)
	if err != nil {
		t.Fatalf("not let in with %s: %v", filepath.Base(seedFile), err)
	}
	return nc
}

func notLetIn(t *testing.T, url, seedFile string) {
	t.Helper()
	opts, err := natsauth.Client{NKey: seedFile}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, append(opts, nats.MaxReconnects(0))...)
	if err == nil {
		nc.Close()
		t.Fatalf("let in with %s", filepath.Base(seedFile))
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("want an authorization violation, got %v", err)
	}
}

// publishRefused publishes on subject as the user of seedFile and waits
// for the server's permissions violation naming it.
func publishRefused(t *testing.T, url, seedFile, subject string) {
	t.Helper()
	errs := make(chan error, 10)
	nc := connectNKey(t, url, seedFile, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	defer nc.Close()
	if err := nc.Publish(subject, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-deadline:
			t.Fatalf("publishing on %s was not refused", subject)
		}
	}
}

// runNATS starts nats-server on the build's NATS StatefulSet's
// configuration as its pod sees it: every ConfigMap and Secret volume
// mounted where the container mounts it (Secrets made at install from
// secrets), the StatefulSet's environment (Secrets from secrets too), and
// replace applied to nats.conf (old -> new, each must be there: ports,
// the store) plus the paths of the pid file and the store; env overrides
// variables of the environment.
func runNATS(t *testing.T, objs []*unstructured.Unstructured, secrets map[string]map[string]string, replace, env map[string]string) *testkit.Process {
	t.Helper()
	root, c := natsRoot(t, objs, secrets)
	conf := natsConfPath(t, root, c)
	text := readFile(t, conf)
	replace = maps.Clone(replace)
	replace["store_dir: /data/jetstream"] = fmt.Sprintf("store_dir: %q", t.TempDir())
	replace["pid_file: /tmp/nats.pid"] = fmt.Sprintf("pid_file: %q", filepath.Join(t.TempDir(), "nats.pid"))
	for old, repl := range replace {
		if !strings.Contains(text, old) {
			t.Fatalf("nats.conf has no %q:\n%s", old, text)
		}
		text = strings.Replace(text, old, repl, 1)
	}
	write(t, conf, text)
	configMaps := configMapsOf(t, objs)
	for _, e := range c.Env {
		v, ok := env[e.Name]
		if !ok {
			v = envValue(t, e, secrets, configMaps)
		}
		t.Setenv(e.Name, v)
	}
	return testkit.StartProcess(t, testkit.NATSServerBinary(t), "-c", conf)
}

// natsRoot writes every ConfigMap and Secret volume of the build's NATS
// StatefulSet where its container mounts them, under a folder of the
// test's own, and returns the folder and the container.
func natsRoot(t *testing.T, objs []*unstructured.Unstructured, secrets map[string]map[string]string) (string, corev1.Container) {
	t.Helper()
	sts := typed[appsv1.StatefulSet](t, find(t, objs, "StatefulSet", "weft-nats"))
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	configMaps := configMapsOf(t, objs)
	all := maps.Clone(secrets)
	for _, o := range objs {
		if o.GetKind() == "Secret" {
			all[o.GetName()] = typedSecret(t, o).StringData
		}
	}
	root := t.TempDir()
	for _, m := range c.VolumeMounts {
		v := volume(spec.Volumes, m.Name)
		var files map[string]string
		switch {
		case v == nil:
			continue // a volume claim template's (the store)
		case v.ConfigMap != nil:
			files = configMaps[v.ConfigMap.Name]
			if files == nil {
				t.Fatalf("volume %s: ConfigMap %s is not in the build", v.Name, v.ConfigMap.Name)
			}
		case v.Secret != nil:
			files = all[v.Secret.SecretName]
			if files == nil {
				t.Fatalf("volume %s: Secret %s is neither in the build nor made by its key Job", v.Name, v.Secret.SecretName)
			}
		default:
			continue
		}
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			write(t, filepath.Join(dir, name), content)
		}
	}
	return root, c
}

// natsConfPath is the configuration file the container's --config names,
// under root.
func natsConfPath(t *testing.T, root string, c corev1.Container) string {
	t.Helper()
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			return filepath.Join(root, c.Args[i+1])
		}
	}
	t.Fatalf("the nats container's args %v name no --config", c.Args)
	return ""
}

func configMapsOf(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			out[o.GetName()] = typed[corev1.ConfigMap](t, o).Data
		}
	}
	return out
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
// Secret or ConfigMap it names. A downward-API field (the pod's name and
// the like), which no kubelet resolves in this test, reads
// "field-<path>".
func envValue(t *testing.T, e corev1.EnvVar, secrets, configMaps map[string]map[string]string) string {
	t.Helper()
	switch {
	case e.ValueFrom == nil:
		return e.Value
	case e.ValueFrom.SecretKeyRef != nil:
		r := e.ValueFrom.SecretKeyRef
		v, ok := secrets[r.Name][r.Key]
		if !ok {
			t.Fatalf("env %s: Secret %s has no key %s", e.Name, r.Name, r.Key)
		}
		return v
	case e.ValueFrom.ConfigMapKeyRef != nil:
		r := e.ValueFrom.ConfigMapKeyRef
		v, ok := configMaps[r.Name][r.Key]
		if !ok {
			t.Fatalf("env %s: ConfigMap %s has no key %s", e.Name, r.Name, r.Key)
		}
		return v
	case e.ValueFrom.FieldRef != nil:
		return "field-" + e.ValueFrom.FieldRef.FieldPath
	}
	t.Fatalf("env %s: an unknown source", e.Name)
	return ""
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
