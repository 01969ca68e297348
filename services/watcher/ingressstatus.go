package watcher

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/services/watcher/ingstatus"
	"github.com/weftio/weft/services/watcher/statuslease"
)

// runIngressStatus starts, on g, the status writer of every target with
// ingress_status (package ingstatus), on the API server of its
// kubernetes source.
func runIngressStatus(ctx context.Context, g *errgroup.Group, env svc.Env, cfg *config.Config) error {
	var m *ingstatus.Metrics
	var leases statuslease.Leases
	for _, name := range cfg.TargetNames() {
		spec := cfg.Targets[name].IngressStatus
		if spec == nil {
			continue
		}
		if m == nil {
			var err error
			if m, err = ingstatus.NewMetrics(env.Registry, Service); err != nil {
				return err
			}
			if leases, err = statusLeases(ctx, env); err != nil {
				return err
			}
		}
		client, closeAll, err := ingressClient(cfg, spec.Source)
		if err != nil {
			return fmt.Errorf("watcher: target %s: ingress_status: %w", name, err)
		}
		o := ingstatus.Options{
			Target: name, Spec: *spec, Client: client, Owner: env.Replica, Log: env.Log, Metrics: m,
			Leases: leases,
		}
		g.Go(func() error {
			defer closeAll()
			return ingstatus.Run(ctx, o)
		})
	}
	return nil
}

// ingressClient is a client of the API server of the kubernetes source
// named source, and what closes its connections.
func ingressClient(cfg *config.Config, source string) (kubernetes.Interface, func(), error) {
	rc, httpClient, closeAll, err := statusConnections(cfg, source, "weft-watcher/ingress-status")
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return client, closeAll, nil
}
