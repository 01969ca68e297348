package msg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Sites. A site is a set of instances reached only through a NATS leaf
// node that dials out to the hub. The leaf node runs JetStream in a domain
// of its own, named as the site, and a deployer of its own
// (weft-deployer --site <site>). Nothing crosses the leaf connection but
// JetStream's stream sourcing across domains:
//
//   - to the site: the verdicts of the site's targets (WEFT_VALIDATED,
//     filtered by target), their validation status (weft-status,
//     validate.<target>) and the bundles (weft-bundles' stream, whole);
//   - to the hub: the site's deploy statuses (weft-status, deploy.>) and
//     outcomes (WEFT_DEPLOYS, weft.deployed.>).
//
// Each direction carries subjects the other side never writes, so nothing
// loops; deploy orders, leases and the DLQ stay local to each side. The
// leaf connection must carry no weft subject, bucket or store subject of
// its own (LeafDeny), or a stream on one side would capture what the other
// side publishes. While the link is down both sides keep working on their
// own JetStream; sourcing resumes where it stopped when it returns.

// DefaultHubDomain is the JetStream domain of the hub's NATS when weft.yaml
// names none.
const DefaultHubDomain = "hub"

// LeafDeny lists the subjects a site's leaf connection must neither import
// nor export (leafnodes.remotes[].deny_imports and deny_exports): weft's
// subjects, buckets and stores, and acknowledgements, since a consumer
// named alike on both sides (deployer-orders) would take the other side's
// acknowledgements as its own. Sourcing needs none of them: its consumers
// acknowledge nothing.
var LeafDeny = []string{AllSubjects, "$KV.>", "$O.>", "$JS.ACK.>"}

// SiteSilence is how long the hub may hear nothing from a site's sourcing
// (heartbeats come every second) before the site is shown unreachable.
const SiteSilence = 5 * time.Second

// WithSites provisions the hub of sites: it sources the deploy statuses
// and outcomes of each, and of no other (WithSites() removes every site's
// sources). Without WithSites or AtSite, Provision keeps the sources a
// stream has: a process that knows no weft.yaml (weft-puller agent, weft
// provision without --config) leaves the sites alone.
func WithSites(sites ...string) ProvisionOption {
	return func(o *provisionOptions) error {
		for _, s := range sites {
			if err := ValidToken(s); err != nil {
				return fmt.Errorf("provision: site: %w", err)
			}
		}
		o.sites, o.sourcesKnown = slices.Clone(sites), true
		return nil
	}
}

// AtSite provisions the leaf node of site: its streams and buckets source
// from the hub (JetStream domain hubDomain) the verdicts and validation
// statuses of targets and every bundle.
func AtSite(site, hubDomain string, targets []string) ProvisionOption {
	return func(o *provisionOptions) error {
		for _, s := range append([]string{site, hubDomain}, targets...) {
			if err := ValidToken(s); err != nil {
				return fmt.Errorf("provision: site %s: %w", site, err)
			}
		}
		if site == hubDomain {
			return fmt.Errorf("provision: site %s has the hub's domain", site)
		}
		o.site, o.hubDomain, o.siteTargets = site, hubDomain, slices.Sorted(slices.Values(targets))
		o.sourcesKnown = true
		return nil
	}
}

// sourced are the streams a hub or a site sources into.
var sourced = []string{StreamValidated, StreamDeploys, KVStream(BucketStatus), ObjectStream(ObjectBundles)}

// streamLookup is the part of jetstream.JetStream that keeps the sources of
// a stream when provisioning is not told them.
type streamLookup interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// withSources sets the sources of c, as o says or, when o does not know
// them, as the stream already has them.
func (o provisionOptions) withSources(ctx context.Context, js Provisioner, c jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	if o.sourcesKnown {
		c.Sources = o.sources(c.Name)
		return c, nil
	}
	if !slices.Contains(sourced, c.Name) {
		return c, nil
	}
	look, ok := js.(streamLookup)
	if !ok {
		return c, nil
	}
	s, err := look.Stream(ctx, c.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return c, nil
	case err != nil:
		return c, err
	}
	c.Sources = s.CachedInfo().Config.Sources
	return c, nil
}

// sources returns the streams sourced into stream name, as o says.
func (o provisionOptions) sources(name string) []*jetstream.StreamSource {
	var out []*jetstream.StreamSource
	if o.site != "" {
		for _, t := range o.siteTargets {
			switch name {
			case StreamValidated:
				out = append(out, &jetstream.StreamSource{Name: name, FilterSubject: ValidatedSubject(t), Domain: o.hubDomain})
			case KVStream(BucketStatus):
				out = append(out,
					&jetstream.StreamSource{Name: name, FilterSubject: statusSubject(ValidationStatusKey(t)), Domain: o.hubDomain},
					&jetstream.StreamSource{Name: name, FilterSubject: statusSubject(PinKey(t)), Domain: o.hubDomain})
			}
		}
		if name == ObjectStream(ObjectBundles) {
			out = append(out, &jetstream.StreamSource{Name: name, Domain: o.hubDomain})
		}
	}
	for _, s := range o.sites {
		switch name {
		case KVStream(BucketStatus):
			out = append(out, &jetstream.StreamSource{Name: name, FilterSubject: statusSubject("deploy.>"), Domain: s})
		case StreamDeploys:
			out = append(out, &jetstream.StreamSource{Name: name, FilterSubject: DeployedAll, Domain: s})
		}
	}
	return out
}

func statusSubject(key string) string { return "$KV." + BucketStatus + "." + key }

// SiteStatus is what the hub knows of a site's link: when it last heard
// from it (a message or a heartbeat of the sourcing of its statuses).
type SiteStatus struct {
	Site string `json:"site"`
	// Reachable: heard from within SiteSilence.
	Reachable bool `json:"reachable"`
	// LastHeard is when the hub last heard from the site; zero: never
	// since the hub's NATS started.
	LastHeard time.Time `json:"lastHeard,omitzero"`
	// Lag is how many messages the hub knows it has not yet copied.
	Lag   uint64 `json:"lag,omitempty"`
	Error string `json:"error,omitempty"`
}

// StreamInfoer is the part of jetstream.JetStream ReadSites needs.
type StreamInfoer interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// ReadSites reports every site whose statuses the status bucket sources,
// by name, as of now.
func ReadSites(ctx context.Context, js StreamInfoer, now time.Time) ([]SiteStatus, error) {
	s, err := js.Stream(ctx, KVStream(BucketStatus))
	if err != nil {
		return nil, fmt.Errorf("sites: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("sites: %w", err)
	}
	var out []SiteStatus
	for _, src := range info.Sources {
		site, ok := sourceDomain(src)
		if !ok || src.FilterSubject != statusSubject("deploy.>") {
			continue
		}
		st := SiteStatus{Site: site, Lag: src.Lag}
		if src.Active >= 0 {
			st.LastHeard = now.Add(-src.Active).UTC().Truncate(time.Second)
			st.Reachable = src.Active <= SiteSilence
		}
		if src.Error != nil {
			st.Error = src.Error.Error()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b SiteStatus) int { return strings.Compare(a.Site, b.Site) })
	return out, nil
}

// sourceDomain is the JetStream domain a source is read from.
func sourceDomain(src *jetstream.StreamSourceInfo) (string, bool) {
	if src.External == nil {
		return "", false
	}
	d, ok := strings.CutPrefix(src.External.APIPrefix, "$JS.")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(d, ".API")
}
