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

// linkSource is one stream sourced across a site's link: into the site's
// domain from the hub's (toSite), or into the hub's from each site's.
// filter gives the source's filter subject for one of the site's targets
// ("*": any); nil sources the whole stream.
type linkSource struct {
	stream string
	toSite bool
	filter func(target string) string
}

// linkSources are every stream sourced across a site's link, in the
// order a stream lists its sources. The sources of each stream and the
// permissions of the link's user (SiteLink) both come from it.
var linkSources = []linkSource{
	{stream: StreamValidated, toSite: true, filter: ValidatedSubject},
	{stream: KVStream(BucketStatus), toSite: true, filter: func(t string) string { return statusSubject(ValidationStatusKey(t)) }},
	{stream: KVStream(BucketStatus), toSite: true, filter: func(t string) string { return statusSubject(PinKey(t)) }},
	{stream: ObjectStream(ObjectBundles), toSite: true},
	{stream: KVStream(BucketStatus), filter: func(string) string { return statusSubject("deploy.>") }},
	{stream: StreamDeploys, filter: func(string) string { return DeployedAll }},
}

// sources returns the streams sourced into stream name, as o says.
func (o provisionOptions) sources(name string) []*jetstream.StreamSource {
	var out []*jetstream.StreamSource
	if o.site != "" {
		for _, t := range o.siteTargets {
			for _, l := range linkSources {
				if l.toSite && l.stream == name && l.filter != nil {
					out = append(out, &jetstream.StreamSource{Name: name, FilterSubject: l.filter(t), Domain: o.hubDomain})
				}
			}
		}
		for _, l := range linkSources {
			if l.toSite && l.stream == name && l.filter == nil {
				out = append(out, &jetstream.StreamSource{Name: name, Domain: o.hubDomain})
			}
		}
	}
	for _, s := range o.sites {
		for _, l := range linkSources {
			if !l.toSite && l.stream == name {
				out = append(out, &jetstream.StreamSource{Name: name, FilterSubject: l.filter(""), Domain: s})
			}
		}
	}
	return out
}

// siteSourcedStreams names the streams sourced into a site (toSite) or
// into the hub.
func siteSourcedStreams(toSite bool) []string {
	var out []string
	for _, l := range linkSources {
		if l.toSite == toSite && !slices.Contains(out, l.stream) {
			out = append(out, l.stream)
		}
	}
	return out
}

// siteLinkPermissions are the allow lists of the user a site's leaf node
// dials the hub as. nats-server applies a user's permissions to a leaf
// connection from the leaf node's side: Publish is what the leaf node
// sends into the hub, Subscribe what the hub sends it (the interest the
// leaf node may register). Stream sourcing across JetStream domains is a
// consumer created through the other domain's API ($JS.<domain>.API.,
// which the receiving server maps to its own), its answer on a $JSC.R.
// reply subject, the deliveries on a $JS.S. subject and their flow
// control on $JS.FC.; acknowledgements are not used (and LeafDeny denies
// them).
//
//   - Into the hub, a site may create only the consumers of what it
//     sources (linkSources toSite, filters included), in any domain: the
//     hub's is named by weft.yaml (hub_domain), and another site's
//     domain, reached through the hub, refuses them since it lets the hub
//     send only consumer requests.
//   - From the hub, a site registers interest in its whole domain's
//     consumer API ($JS.<site>.API.CONSUMER.>): NATS matches a wildcard
//     subscription against the allow list whole, so the hub's sources of
//     the site cannot be narrowed here; the hub's own users decide who may
//     send such requests (only the admin can).
//
// One user serves every site: a site's link could register interest in
// another site's domain.
func siteLinkPermissions() Permissions {
	flow := []string{"$JSC.R.*", "$JS.S.*", "$JS.FC.>"}
	var pub []string
	for _, l := range linkSources {
		if !l.toSite {
			continue
		}
		create := "$JS.*.API.CONSUMER.CREATE." + l.stream
		if l.filter != nil {
			create += ".*." + l.filter("*")
		}
		pub = append(pub, create)
	}
	return Permissions{
		Publish:   dedup(append(pub, flow...)),
		Subscribe: append([]string{"$JS.*.API.CONSUMER.>"}, flow...),
	}
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
