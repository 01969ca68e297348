package kubeclient_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.LeakOptions()...) }

func TestKubeClient(t *testing.T) {
	k := kubetest.Start(t)
	t.Run("rest config", func(t *testing.T) { testRESTConfig(t, k) })
	t.Run("own connections", func(t *testing.T) { testOwnConnections(t, k) })
}

func testRESTConfig(t *testing.T, k *kubetest.Env) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cases := []struct {
		name, kubeconfig, context, env string
		ok                             bool
	}{
		{"explicit file", k.Kubeconfig, "", "", true},
		{"explicit file and its context", k.Kubeconfig, "envtest", "", true},
		{"context the file lacks", k.Kubeconfig, "elsewhere", "", false},
		{"$KUBECONFIG", "", "", k.Kubeconfig, true},
		{"missing file", k.Kubeconfig + ".absent", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", c.env)
			cfg, err := kubeclient.RESTConfig(c.kubeconfig, c.context)
			if !c.ok {
				if err == nil {
					t.Fatalf("RESTConfig succeeded with host %s", cfg.Host)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSuffix(cfg.Host, "/") != strings.TrimSuffix(k.Config.Host, "/") {
				t.Errorf("host %s, want %s", cfg.Host, k.Config.Host)
			}
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dc.ServerVersion(); err != nil {
				t.Errorf("the config does not reach the server: %v", err)
			}
		})
	}
}

// testOwnConnections checks that the copy names the given user agent only
// when the config names none, leaves the config it copies alone, dials
// through the config's own Dial, and that CloseAll closes what it opened.
func testOwnConnections(t *testing.T, k *kubetest.Env) {
	for _, c := range []struct{ name, configured, want string }{
		{"default user agent", "", "weft-test"},
		{"configured user agent", "someone/1.0", "someone/1.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := rest.CopyConfig(k.Config)
			base.UserAgent = c.configured
			var dials atomic.Int32
			base.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}
			cfg, hc, dialer, err := kubeclient.OwnConnections(base, "weft-test")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.UserAgent != c.want {
				t.Errorf("user agent %q, want %q", cfg.UserAgent, c.want)
			}
			if base.UserAgent != c.configured {
				t.Errorf("the copied config's user agent became %q", base.UserAgent)
			}
			cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
				t.Fatalf("the client does not reach the server: %v", err)
			}
			if dials.Load() == 0 {
				t.Error("the config's own Dial was not used")
			}
			dialer.CloseAll()
			hc.CloseIdleConnections()
		})
	}
}
