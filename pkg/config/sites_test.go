package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

const siteTarget = "haproxy_config: {template: x}, deploy: {driver: files, dest: /o"

// TestSiteErrors: a site setting weft cannot use is a configuration
// error naming the field and what is wrong.
func TestSiteErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown site", "sites: [edge-1]\ntargets: {t: {" + siteTarget + ", site: edge-2}}}", `weft.yaml:2:80: targets.t.deploy.site: unknown site "edge-2" (sites: edge-1)`},
		{"site without sites", "targets: {t: {" + siteTarget + ", site: edge-1}}}", `targets.t.deploy.site: unknown site "edge-1": weft.yaml lists no sites`},
		{"site name with a dot", "sites: [edge.1]", `weft.yaml:1:9: sites[0]: invalid subject token: "edge.1" has '.' at 4`},
		{"empty site name", "sites: ['']", `sites[0]: invalid subject token: empty`},
		{"site listed twice", "sites: [a, b, a]", `weft.yaml:1:15: sites[2]: "a" is listed twice`},
		{"site named as the hub", "sites: [hub]", `sites[0]: "hub" is the hub's JetStream domain`},
		{"site named as a given hub domain", "hub_domain: central\nsites: [central]", `sites[0]: "central" is the hub's JetStream domain`},
		{"bad hub domain", "hub_domain: 'a b'", `hub_domain: invalid subject token`},
		{"sites not a list", "sites: {edge-1: {}}", `sites: must be a list`},
		{"pods at a site", "sites: [edge-1]\nwatched_resources: {pods: {api_version: v1, kind: Pod}}\ntargets: {t: {base: /b, haproxy_config: {template: x}, deploy: {driver: dataplane, dataplane: {user: u}, pods: {type: pods}, site: edge-1}}}", `targets.t.deploy.pods: a target of a site has no Pods to follow`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.yaml), "/tmp")
			if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

// TestSiteTargets: each target is delivered by the hub or by one site.
func TestSiteTargets(t *testing.T) {
	c, err := config.Parse([]byte("sites: [edge-1, edge-2]\ntargets:\n  a: {"+siteTarget+"/a, site: edge-1}}\n  b: {"+siteTarget+"/b}}\n  c: {"+siteTarget+"/c, site: edge-1}}\n"), "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	for site, want := range map[string][]string{"": {"b"}, "edge-1": {"a", "c"}, "edge-2": nil} {
		if got := c.SiteTargets(site); !slices.Equal(got, want) {
			t.Errorf("SiteTargets(%q) = %v, want %v", site, got, want)
		}
	}
	if c.HubDomain != "hub" {
		t.Errorf("hub domain %q, want the default hub", c.HubDomain)
	}
	if err := c.CheckSite("edge-1"); err != nil {
		t.Error(err)
	}
	if err := c.CheckSite("edge-3"); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "edge-1, edge-2") {
		t.Errorf("CheckSite(edge-3) = %v, want ErrInvalid naming the sites", err)
	}
}
