package config_test

import (
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// TestGatewayStatus: gateway_status takes its controller from the gateway
// library's option, its source from the only kubernetes source, and checks
// its from as ingress_status does.
func TestGatewayStatus(t *testing.T) {
	cases := []struct {
		name, target string
		want         config.GatewayStatus
		wantErr      string
	}{
		{"defaults", `
    library_options: {controller_name: example.com/gw}
    gateway_status: {}`,
			config.GatewayStatus{Source: "cluster", ControllerName: "example.com/gw", Resync: config.Duration(config.DefaultGatewayStatusResync)}, ""},
		{"no option", `
    gateway_status: {resync: 1m, from: {pods: {namespace: ns, selector: app=haproxy}}}`,
			config.GatewayStatus{Source: "cluster", ControllerName: config.DefaultGatewayController, Resync: config.Duration(60e9),
				From: &config.IngressStatusFrom{Pods: &config.IngressStatusPods{Namespace: "ns", Selector: "app=haproxy", Address: config.PodHostIP}}}, ""},
		{"not kubernetes", `
    gateway_status: {source: files}`, config.GatewayStatus{}, `targets.edge.gateway_status.source: "files" is a manifests source`},
		{"two froms", `
    gateway_status: {from: {service: a/b, addresses: [192.0.2.1]}}`, config.GatewayStatus{}, "targets.edge.gateway_status.from: exactly one of service, pods and addresses"},
		{"one controller, two targets", `
    gateway_status: {}
  other:
    haproxy_config: {template: "global\n"}
    deploy: {driver: files, dest: out2}
    gateway_status: {}`, config.GatewayStatus{}, `targets.other.gateway_status.controller_name: controller "weft.io/gateway-controller" is written by target "edge" too`},
		{"bad address", `
    gateway_status: {from: {addresses: ["not an address"]}}`, config.GatewayStatus{}, "targets.edge.gateway_status.from.addresses[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(`
sources:
  - {name: files, type: manifests, path: m}
  - {name: cluster, type: kubernetes}
targets:
  edge:
    haproxy_config: {template: "global\n"}
    deploy: {driver: files, dest: out}`+tc.target+"\n"), t.TempDir())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := *c.Targets["edge"].GatewayStatus
			if got.Source != tc.want.Source || got.ControllerName != tc.want.ControllerName || got.Resync != tc.want.Resync ||
				(got.From == nil) != (tc.want.From == nil) ||
				(got.From != nil && (got.From.Pods == nil || *got.From.Pods != *tc.want.From.Pods)) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
