// Package kubetest is weft's test Kubernetes control plane: a real
// kube-apiserver on etcd (envtest), with kube-controller-manager on
// request, started per test and stopped when it ends; and the puller's
// set-up on it. Apart from testkit so that the tests that do not start a
// control plane do not link Kubernetes' clients and envtest.
package kubetest

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/weftio/weft/pkg/testkit"
)

// Version is the Kubernetes release the test control plane is built
// from (hack/envtest pins it).
const Version = "v1.36.3"

// Env is a running Kubernetes control plane for one test: a real
// kube-apiserver on etcd, and with WithControllerManager a
// kube-controller-manager running the job, garbage-collector and namespace
// controllers. There is no scheduler and no kubelet: Pods stay Pending until
// a test sets their status.
type Env struct {
	// Config authenticates as an administrator (group system:masters) with a
	// client certificate.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file holding Config, for
	// programs and code that read one.
	Kubeconfig string
	Client     dynamic.Interface
	Clientset  kubernetes.Interface

	env *envtest.Environment
}

// Option configures Start.
type Option func(*options)

type options struct {
	controllerManager bool
	controllers       []string
}

// WithControllerManager also runs kube-controller-manager with the job,
// garbage-collector and namespace controllers, so Jobs create Pods, owner
// references are collected and deleted namespaces are emptied, and with
// the controllers named in more (such as "deployment-controller" and
// "replicaset-controller", so Deployments create Pods).
func WithControllerManager(more ...string) Option {
	return func(o *options) {
		o.controllerManager = true
		o.controllers = append(o.controllers, more...)
	}
}

// AssetsDir is where Start finds kube-apiserver, etcd and
// kube-controller-manager: $KUBEBUILDER_ASSETS when set, else the folder
// hack/envtest/build.sh builds into by default (in testkit.CacheDir).
func AssetsDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(testkit.CacheDir(), "envtest", Version)
}

// Binary returns the path of one of the test control plane's programs
// (kube-apiserver, etcd, kube-controller-manager) in AssetsDir, or ends
// the test through testkit.Need when it has not been built.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := binaries(name)
	testkit.Need(t, name+" of the test control plane (hack/envtest/build.sh)", err)
	return p[0]
}

// binaries returns the paths of names in AssetsDir, or an error
// naming those that are not executables there.
func binaries(names ...string) ([]string, error) {
	dir := AssetsDir()
	var paths, missing []string
	for _, b := range names {
		p := filepath.Join(dir, b)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
		paths = append(paths, p)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s in %s", testkit.ErrNotFound, strings.Join(missing, ", "), dir)
	}
	return paths, nil
}

var quietControllerRuntime sync.Once

// Start starts a Kubernetes control plane for the test and stops it when the
// test ends. The binaries must have been built (`make deps` builds them, or
// run hack/envtest/build.sh); when they are missing the test ends through
// testkit.Need.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dir := AssetsDir()
	bins := []string{"kube-apiserver", "etcd"}
	if o.controllerManager {
		bins = append(bins, "kube-controller-manager")
	}
	_, err := binaries(bins...)
	testkit.Need(t, "the test control plane (hack/envtest/build.sh)", err)
	// envtest logs through controller-runtime's logger, which warns once
	// when nothing was ever set.
	quietControllerRuntime.Do(func() { ctrllog.SetLogger(logr.Discard()) })

	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	env.ControlPlane.GetAPIServer().Path = filepath.Join(dir, "kube-apiserver")
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(dir, "etcd")}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		t.Fatalf("start kube-apiserver and etcd from %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver and etcd: %v", err)
		}
	})
	k := &Env{Config: cfg, env: env}
	k.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(k.Kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if k.Client, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if k.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if o.controllerManager {
		startControllerManager(t, filepath.Join(dir, "kube-controller-manager"), k.Kubeconfig, o.controllers)
	}
	return k
}

// User provisions a user authenticated by a client certificate, with the
// given name and groups and no permissions beyond what RBAC grants them, and
// returns a config that authenticates as that user.
func (k *Env) User(t testing.TB, name string, groups ...string) *rest.Config {
	t.Helper()
	u, err := k.env.AddUser(envtest.User{Name: name, Groups: groups}, rest.CopyConfig(k.Config))
	if err != nil {
		t.Fatalf("add user %s: %v", name, err)
	}
	return u.Config()
}

// InstallCRDs creates the CustomResourceDefinitions of the YAML files at
// paths (files, or folders of them) and waits until the API server serves
// their resources. A path that does not exist or a definition the API
// server refuses ends the test.
func (k *Env) InstallCRDs(t testing.TB, paths ...string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crds, err := envtest.InstallCRDs(k.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	if err != nil {
		t.Fatalf("install the CustomResourceDefinitions of %v: %v", paths, err)
	}
	if len(crds) == 0 {
		t.Fatalf("no CustomResourceDefinition in %v", paths)
	}
	return crds
}

// Webhooks are admission webhooks the test control plane calls on a local
// HTTPS address, with a serving certificate made for it.
type Webhooks struct {
	// Addr is host:port, where the test serves the webhooks.
	Addr string
	// CertFile and KeyFile are the serving certificate and key, trusted by
	// the API server through CAData.
	CertFile, KeyFile string
	CAData            []byte
}

// InstallWebhooks creates the MutatingWebhookConfigurations and
// ValidatingWebhookConfigurations of the YAML files at paths, each webhook
// called at https://<Addr><its service's path> with a certificate made for
// Addr (the service's name and namespace are dropped), and waits until the
// API server serves them. The test serves the webhooks itself, with the
// returned certificate; until it does, the API server applies each
// webhook's failurePolicy.
func (k *Env) InstallWebhooks(t testing.TB, paths ...string) *Webhooks {
	t.Helper()
	o := &envtest.WebhookInstallOptions{Paths: paths, LocalServingHost: "127.0.0.1"}
	if err := o.PrepWithoutInstalling(); err != nil {
		t.Fatalf("prepare the webhooks of %v: %v", paths, err)
	}
	t.Cleanup(func() { _ = o.Cleanup() })
	if len(o.MutatingWebhooks)+len(o.ValidatingWebhooks) == 0 {
		t.Fatalf("no webhook configuration in %v", paths)
	}
	// envtest joins host and path with a slash of its own: a path starting
	// with one would be called as //path.
	fix := func(cc *admissionregistrationv1.WebhookClientConfig) {
		if cc.URL == nil {
			return
		}
		if u, err := url.Parse(*cc.URL); err == nil {
			u.Path = "/" + strings.TrimLeft(u.Path, "/")
			s := u.String()
			cc.URL = &s
		}
	}
	for _, c := range o.MutatingWebhooks {
		for i := range c.Webhooks {
			fix(&c.Webhooks[i].ClientConfig)
		}
	}
	for _, c := range o.ValidatingWebhooks {
		for i := range c.Webhooks {
			fix(&c.Webhooks[i].ClientConfig)
		}
	}
	if err := o.Install(k.Config); err != nil {
		t.Fatalf("install the webhooks of %v: %v", paths, err)
	}
	return &Webhooks{
		Addr:     net.JoinHostPort(o.LocalServingHost, strconv.Itoa(o.LocalServingPort)),
		CertFile: filepath.Join(o.LocalServingCertDir, "tls.crt"),
		KeyFile:  filepath.Join(o.LocalServingCertDir, "tls.key"),
		CAData:   o.LocalServingCAData,
	}
}

// startControllerManager runs kube-controller-manager against kubeconfig
// until the test ends, once its health endpoint answers.
func startControllerManager(t testing.TB, bin, kubeconfig string, more []string) {
	t.Helper()
	port := testkit.FreePort(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(append([]string{"job-controller", "garbage-collector-controller", "namespace-controller"}, more...), ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+dir,
		"--concurrent-gc-syncs=5",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t.Cleanup(func() { _ = logFile.Close() })
	stop, exited, exitErr := testkit.StartCommand(t, cmd, 15*time.Second)
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("kube-controller-manager log (last lines):\n%s", testkit.Tail(logPath, 40))
		}
	})

	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // its own self-signed serving certificate
	}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-exited:
			t.Fatalf("kube-controller-manager exited (%v):\n%s", exitErr(), testkit.Tail(logPath, 40))
		default:
		}
		if err := testkit.Healthy(client, url); err == nil {
			return
		} else if time.Now().After(deadline) {
			stop()
			t.Fatalf("kube-controller-manager not healthy within a minute: %v\n%s", err, testkit.Tail(logPath, 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
