package msg_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

type source struct{ stream, filter, apiPrefix string }

func sourcesOf(t *testing.T, js jetstream.JetStream, stream string) []source {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []source
	for _, src := range info.Config.Sources {
		ext := ""
		if src.External != nil {
			ext = src.External.APIPrefix
		}
		out = append(out, source{src.Name, src.FilterSubject, ext})
	}
	return out
}

// TestProvisionSites: a site's leaf node sources its targets' verdicts and
// validation statuses and every bundle from the hub's domain; the hub
// sources each site's deploy statuses and outcomes; the rest is local on
// both sides, and each side sources what the other never sources back.
func TestProvisionSites(t *testing.T) {
	ctx := context.Background()
	siteJS, hubJS := jetStream(t), jetStream(t)
	if err := msg.Provision(ctx, siteJS, 1, msg.AtSite("edge-1", "hub", []string{"web", "api"})); err != nil {
		t.Fatal(err)
	}
	if err := msg.Provision(ctx, hubJS, 1, msg.WithSites("edge-1", "edge-2")); err != nil {
		t.Fatal(err)
	}
	hub, edge1, edge2 := "$JS.hub.API", "$JS.edge-1.API", "$JS.edge-2.API"
	tests := []struct {
		js     jetstream.JetStream
		stream string
		want   []source
	}{
		{siteJS, msg.StreamValidated, []source{{msg.StreamValidated, "weft.validated.api", hub}, {msg.StreamValidated, "weft.validated.web", hub}}},
		{siteJS, "KV_weft-status", []source{{"KV_weft-status", "$KV.weft-status.validate.api", hub}, {"KV_weft-status", "$KV.weft-status.pin.api", hub}, {"KV_weft-status", "$KV.weft-status.validate.web", hub}, {"KV_weft-status", "$KV.weft-status.pin.web", hub}}},
		{siteJS, "OBJ_weft-bundles", []source{{"OBJ_weft-bundles", "", hub}}},
		{siteJS, msg.StreamDeploys, nil},
		{siteJS, "KV_weft-leases", nil},
		{hubJS, "KV_weft-status", []source{{"KV_weft-status", "$KV.weft-status.deploy.>", edge1}, {"KV_weft-status", "$KV.weft-status.deploy.>", edge2}}},
		{hubJS, msg.StreamDeploys, []source{{msg.StreamDeploys, "weft.deployed.>", edge1}, {msg.StreamDeploys, "weft.deployed.>", edge2}}},
		{hubJS, msg.StreamValidated, nil},
		{hubJS, "OBJ_weft-bundles", nil},
	}
	for _, tt := range tests {
		if got := sourcesOf(t, tt.js, tt.stream); !slices.Equal(got, tt.want) {
			t.Errorf("%s sources %v, want %v", tt.stream, got, tt.want)
		}
	}

	// A process that knows no weft.yaml keeps the sites' sources; one
	// whose weft.yaml lists other sites sets them.
	if err := msg.Provision(ctx, hubJS, 1); err != nil {
		t.Fatal(err)
	}
	if got := sourcesOf(t, hubJS, msg.StreamDeploys); len(got) != 2 {
		t.Errorf("provisioning without sites changed the hub's sources to %v", got)
	}
	if err := msg.Provision(ctx, siteJS, 1); err != nil {
		t.Fatal(err)
	}
	if got := sourcesOf(t, siteJS, "OBJ_weft-bundles"); len(got) != 1 {
		t.Errorf("provisioning without sites changed the site's sources to %v", got)
	}
	if err := msg.Provision(ctx, hubJS, 1, msg.WithSites("edge-1")); err != nil {
		t.Fatal(err)
	}
	if got, want := sourcesOf(t, hubJS, msg.StreamDeploys), []source{{msg.StreamDeploys, "weft.deployed.>", edge1}}; !slices.Equal(got, want) {
		t.Errorf("sources %v, want %v", got, want)
	}

	// Neither site is there: the hub has never heard from them.
	sites, err := msg.ReadSites(ctx, hubJS, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := []msg.SiteStatus{{Site: "edge-1"}}
	for i := range sites {
		sites[i].Error = ""
	}
	if !slices.Equal(sites, want) {
		t.Errorf("sites %+v, want %+v", sites, want)
	}
	// A hub without sites has none to report.
	if sites, err := msg.ReadSites(ctx, siteJS, time.Now()); err != nil || len(sites) != 0 {
		t.Errorf("sites of a hub without sites: %v, %v", sites, err)
	}
}

func TestProvisionSiteOptions(t *testing.T) {
	ctx := context.Background()
	js := jetStream(t)
	for _, opt := range []msg.ProvisionOption{
		msg.AtSite("edge.1", "hub", nil),
		msg.AtSite("edge-1", "hub", []string{"a b"}),
		msg.AtSite("hub", "hub", nil),
		msg.WithSites("edge-1", ""),
	} {
		if err := msg.Provision(ctx, js, 1, opt); err == nil || !errors.Is(err, msg.ErrBadToken) && err.Error() != "provision: site hub has the hub's domain" {
			t.Errorf("Provision = %v, want a refused site", err)
		}
	}
}
