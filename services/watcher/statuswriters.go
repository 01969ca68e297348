package watcher

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/rest"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/services/watcher/statuslease"
)

// statusLeases opens the leases bucket the status writers (Ingress and
// Gateway API status) elect their writer in.
func statusLeases(ctx context.Context, env svc.Env) (statuslease.Leases, error) {
	var kv jetstream.KeyValue
	if err := msg.Open(ctx, "watcher: leases bucket", func(ctx context.Context) (err error) {
		kv, err = env.JS.KeyValue(ctx, msg.BucketLeases)
		return err
	}); err != nil {
		return statuslease.Leases{}, err
	}
	return statuslease.Leases{KV: kv, Pub: env.JS}, nil
}

// statusConnections is the REST configuration of the API server of the
// kubernetes source named source, with connections of its own under
// userAgent, their HTTP client, and what closes them.
func statusConnections(cfg *config.Config, source, userAgent string) (*rest.Config, *http.Client, func(), error) {
	i := slices.IndexFunc(cfg.Sources, func(s config.Source) bool { return s.Name == source })
	if i < 0 {
		return nil, nil, nil, fmt.Errorf("source %q not found", source)
	}
	src := cfg.Sources[i]
	rc, err := kubeclient.RESTConfig(src.Kubeconfig, src.Context)
	if err != nil {
		return nil, nil, nil, err
	}
	rc, httpClient, dialer, err := kubeclient.OwnConnections(rc, userAgent)
	if err != nil {
		return nil, nil, nil, err
	}
	return rc, httpClient, func() { httpClient.CloseIdleConnections(); dialer.CloseAll() }, nil
}
