package host

import (
	"context"
	"fmt"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/natsauth"
)

// sitesKey is what the sources of a process at site depend on in cfg: its
// sites, the hub's domain and the site's targets.
func sitesKey(cfg *config.Config, site string) string {
	if cfg == nil {
		return ""
	}
	return fmt.Sprintf("%q %q %q", cfg.Sites, cfg.HubDomain, cfg.SiteTargets(site))
}

// reprovisionOn passes on every configuration of configs, provisioning
// again first when its sites (or, at a site, the site's targets) differ
// from those provisioned (first: the configuration provisioned at start,
// nil when none was): a site added to weft.yaml has its statuses sourced
// at once, not at the next restart. A provisioning that fails is logged
// at ERROR and tried again on the next configuration; the services run
// on the new one meanwhile.
func reprovisionOn(ctx context.Context, env svc.Env, s Settings, js msg.Provisioner, refused <-chan error, first *config.Config, configs <-chan *config.Config) <-chan *config.Config {
	out := make(chan *config.Config)
	done := sitesKey(first, s.Site)
	go func() {
		defer close(out)
		for {
			var cfg *config.Config
			select {
			case <-ctx.Done():
				return
			case c, ok := <-configs:
				if !ok {
					return
				}
				cfg = c
			}
			if key := sitesKey(cfg, s.Site); key != done {
				drain(refused) // refusals logged since, not of this provisioning
				pctx, cancel := context.WithTimeout(ctx, time.Minute)
				err := natsauth.Provision(pctx, js, s.Replicas, refused, s.provisionOptions(cfg.ProvisionOptions(s.Site)...)...)
				cancel()
				if err != nil {
					env.Log.Error("provisioning for the configuration's sites failed; the sources stay as they were", "err", err)
				} else {
					done = key
					env.Log.Info("provisioned for the configuration's sites", "sites", cfg.Sites)
				}
			}
			select {
			case out <- cfg:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func drain(c <-chan error) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}
