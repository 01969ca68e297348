// Package kubeclient reaches a Kubernetes API server the way every weft
// service does: RESTConfig finds the server (a kubeconfig file, the
// in-cluster service account, $KUBECONFIG or ~/.kube/config), and
// OwnConnections gives a client connections of its own, which its owner
// closes all at once when it stops. It holds no state and is safe for
// concurrent use.
package kubeclient

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/connrotation"
)

// RESTConfig finds the API server: the kubeconfig file when one is named,
// else the in-cluster service account when running in a pod (and no context
// is asked for), else $KUBECONFIG or ~/.kube/config. context picks a
// kubeconfig context (empty: the current one).
func RESTConfig(kubeconfig, context string) (*rest.Config, error) {
	if kubeconfig == "" && context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kube: in-cluster config: %w", err)
		}
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		where := kubeconfig
		if where == "" {
			where = "$KUBECONFIG or ~/.kube/config"
		}
		return nil, fmt.Errorf("kube: kubeconfig %s: %w", where, err)
	}
	return cfg, nil
}

// OwnConnections copies c with a dialer of its own, so that its owner can
// close every connection it opened (dialer.CloseAll) when it stops, and
// returns the HTTP client for it. userAgent is the copy's user agent when
// c names none.
func OwnConnections(c *rest.Config, userAgent string) (*rest.Config, *http.Client, *connrotation.Dialer, error) {
	cfg := rest.CopyConfig(c)
	if cfg.UserAgent == "" {
		cfg.UserAgent = userAgent
	}
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	dialer := connrotation.NewDialer(dial)
	cfg.Dial = dialer.DialContext
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, httpClient, dialer, nil
}
