package controller

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/kubeclient"
	"github.com/weftio/weft/pkg/svc"
)

// RunConfig runs the controller on weft.yaml's puller section, reaching
// the API server as the section's source does (its kubeconfig and
// context, else in-cluster). It is the controller's host.RunFunc.
func RunConfig(ctx context.Context, env svc.Env, cfg *config.Config) error {
	if cfg.Puller == nil {
		return fmt.Errorf("%s: weft.yaml has no puller section", Service)
	}
	var src config.Source
	for _, s := range cfg.Sources {
		if s.Name == cfg.Puller.Source {
			src = s
		}
	}
	rc, err := kubeclient.RESTConfig(src.Kubeconfig, src.Context)
	if err != nil {
		return fmt.Errorf("%s: %w", Service, err)
	}
	rc, httpClient, dialer, err := kubeclient.OwnConnections(rc, "weft-puller-controller")
	if err != nil {
		return fmt.Errorf("%s: %w", Service, err)
	}
	defer dialer.CloseAll()
	kube, err := kubernetes.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return fmt.Errorf("%s: %w", Service, err)
	}
	dyn, err := dynamic.NewForConfigAndClient(rc, httpClient)
	if err != nil {
		return fmt.Errorf("%s: %w", Service, err)
	}
	c, err := FromConfig(cfg, kube, dyn)
	if err != nil {
		return err
	}
	return Run(ctx, env, c)
}
