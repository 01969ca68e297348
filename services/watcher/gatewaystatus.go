package watcher

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/services/watcher/gwstatus"
	"github.com/weftio/weft/services/watcher/statuslease"
)

// runGatewayStatus starts, on g, the Gateway API status writer of every
// target with gateway_status (package gwstatus), on the API server of its
// kubernetes source.
func runGatewayStatus(ctx context.Context, g *errgroup.Group, env svc.Env, cfg *config.Config, status jetstream.KeyValue) error {
	var m *gwstatus.Metrics
	var leases statuslease.Leases
	var bundles *msg.BundleStore
	for _, name := range cfg.TargetNames() {
		spec := cfg.Targets[name].GatewayStatus
		if spec == nil {
			continue
		}
		if m == nil {
			var err error
			if m, err = gwstatus.NewMetrics(env.Registry, Service); err != nil {
				return err
			}
			if leases, err = statusLeases(ctx, env); err != nil {
				return err
			}
			bundles = msg.NewBundleStore(env.JS)
		}
		dyn, kube, closeAll, err := gatewayClients(cfg, spec.Source)
		if err != nil {
			return fmt.Errorf("watcher: target %s: gateway_status: %w", name, err)
		}
		o := gwstatus.Options{
			Target: name, Spec: *spec, Client: dyn, Kube: kube, Status: status, Bundles: bundles,
			Leases: leases, Owner: env.Replica, Log: env.Log, Metrics: m,
		}
		g.Go(func() error {
			defer closeAll()
			return gwstatus.Run(ctx, o)
		})
	}
	return nil
}

// gatewayClients are a dynamic and a typed client of the API server of
// the kubernetes source named source, and what closes their connections.
func gatewayClients(cfg *config.Config, source string) (dynamic.Interface, kubernetes.Interface, func(), error) {
	rc, httpClient, closeAll, err := statusConnections(cfg, source, "weft-watcher/gateway-status")
	if err != nil {
		return nil, nil, nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	kube, err := kubernetes.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return dyn, kube, closeAll, nil
}
