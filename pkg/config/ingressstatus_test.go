package config_test

import (
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// ingress_status takes its class from the ingress library's option, its
// source from the only kubernetes source, and Pods' host IPs by default.
func TestIngressStatusDefaults(t *testing.T) {
	cases := []struct {
		name, target string
		want         config.IngressStatus
	}{
		{"class from the library", `
    library: ingress
    library_options: {ingress_class: edge}
    ingress_status: {from: {service: weft-system/lb}}`,
			config.IngressStatus{Source: "cluster", Class: "edge", From: config.IngressStatusFrom{Service: "weft-system/lb"}, Resync: config.Duration(config.DefaultIngressStatusResync)}},
		{"default class, pods", `
    haproxy_config: {template: "global\n"}
    ingress_status: {default_class: true, resync: 1m, from: {pods: {namespace: ns, selector: app=haproxy}}}`,
			config.IngressStatus{Source: "cluster", Class: config.DefaultIngressClass, DefaultClass: true, Resync: config.Duration(60e9),
				From: config.IngressStatusFrom{Pods: &config.IngressStatusPods{Namespace: "ns", Selector: "app=haproxy", Address: config.PodHostIP}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(`
sources:
  - {name: files, type: manifests, path: m}
  - {name: cluster, type: kubernetes}
targets:
  edge:
    deploy: {driver: files, dest: out}`+tc.target+"\n"), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			got := *c.Targets["edge"].IngressStatus
			if got.Source != tc.want.Source || got.Class != tc.want.Class || got.DefaultClass != tc.want.DefaultClass ||
				got.Resync != tc.want.Resync || got.From.Service != tc.want.From.Service ||
				(got.From.Pods == nil) != (tc.want.From.Pods == nil) || (got.From.Pods != nil && *got.From.Pods != *tc.want.From.Pods) {
				t.Errorf("got %+v (pods %+v), want %+v", got, got.From.Pods, tc.want)
			}
		})
	}
}
