// Package bench is the renderer's benchmark workload: an HAProxy
// configuration rendered from N Ingress-like objects, each with a Service
// and an EndpointSlice of a few endpoints, written once in Jinja2 syntax
// with loops, ifs, filters, a macro, includes and set.
//
// The same templates render in two shapes: Spec(false) loops over every
// Ingress in the outputs (a full render), Spec(true) renders each Ingress
// as a fragment that the outputs join. Both give byte-identical files. The
// benchmarks in this package compare the shapes, the incremental re-render
// after one EndpointSlice change, the index's memory, and Python's Jinja2
// rendering the same templates and data.
package bench

import (
	"fmt"

	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
)

// Types are the watched types of the workload and their index_by paths.
var Types = []index.Spec{
	{Type: "ingresses", IndexBy: []string{"metadata.namespace", "metadata.name"}},
	{Type: "services", IndexBy: []string{"metadata.namespace", "metadata.name"}},
	{Type: "endpoints", IndexBy: []string{"metadata.namespace", "metadata.labels['kubernetes.io/service-name']"}},
}

// Object is one stored object of the workload.
type Object struct {
	Type string
	ID   string
	Obj  map[string]any
}

func name(i int) (ns, n string) {
	return fmt.Sprintf("team-%02d", i%20), fmt.Sprintf("app-%05d", i)
}

// Ingress returns the i-th Ingress: one rule with two paths to its
// Service, some annotations, every fourth with TLS.
func Ingress(i int) Object {
	ns, n := name(i)
	host := n + ".example.com"
	ann := map[string]any{"kubernetes.io/ingress.class": "haproxy"}
	if i%3 == 0 {
		ann["haproxy.org/load-balance"] = "leastconn"
	}
	if i%5 == 0 {
		ann["haproxy.org/timeout-server"] = "30s"
	}
	spec := map[string]any{
		"ingressClassName": "haproxy",
		"rules": []any{map[string]any{
			"host": host,
			"http": map[string]any{"paths": []any{
				map[string]any{"path": "/", "pathType": "Prefix", "backend": map[string]any{"service": map[string]any{"name": n, "port": map[string]any{"name": "http"}}}},
				map[string]any{"path": "/api", "pathType": "Exact", "backend": map[string]any{"service": map[string]any{"name": n, "port": map[string]any{"number": 8080}}}},
			}},
		}},
	}
	if i%4 == 0 {
		spec["tls"] = []any{map[string]any{"hosts": []any{host}, "secretName": n + "-tls"}}
	}
	return Object{Type: "ingresses", ID: ns + "/" + n, Obj: map[string]any{
		"apiVersion": "networking.k8s.io/v1",
		"kind":       "Ingress",
		"metadata":   map[string]any{"namespace": ns, "name": n, "uid": fmt.Sprintf("uid-%08d", i), "annotations": ann},
		"spec":       spec,
	}}
}

// Service returns the i-th Service with two ports.
func Service(i int) Object {
	ns, n := name(i)
	return Object{Type: "services", ID: ns + "/" + n, Obj: map[string]any{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   map[string]any{"namespace": ns, "name": n, "labels": map[string]any{"app": n}},
		"spec": map[string]any{
			"selector": map[string]any{"app": n},
			"ports": []any{
				map[string]any{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
				map[string]any{"name": "api", "port": 8080, "targetPort": 9090, "protocol": "TCP"},
			},
		},
	}}
}

// EndpointSlice returns the i-th Service's EndpointSlice at generation gen:
// three endpoints whose addresses and readiness depend on gen.
func EndpointSlice(i, gen int) Object {
	ns, n := name(i)
	eps := make([]any, 3)
	for k := range eps {
		eps[k] = map[string]any{
			"addresses":  []any{fmt.Sprintf("10.%d.%d.%d", (i>>8)&255, i&255, (k+gen)%250+1)},
			"conditions": map[string]any{"ready": (i+k+gen)%7 != 0},
			"targetRef":  map[string]any{"kind": "Pod", "name": fmt.Sprintf("%s-%d", n, k+gen)},
		}
	}
	return Object{Type: "endpoints", ID: ns + "/" + n + "-x7k2q", Obj: map[string]any{
		"apiVersion":  "discovery.k8s.io/v1",
		"kind":        "EndpointSlice",
		"addressType": "IPv4",
		"metadata":    map[string]any{"namespace": ns, "name": n + "-x7k2q", "labels": map[string]any{"kubernetes.io/service-name": n}},
		"endpoints":   eps,
		"ports":       []any{map[string]any{"name": "http", "port": 8080}, map[string]any{"name": "api", "port": 9090}},
	}}
}

// Objects returns the n Ingresses, Services and EndpointSlices.
func Objects(n int) []Object {
	out := make([]Object, 0, 3*n)
	for i := range n {
		out = append(out, Ingress(i), Service(i), EndpointSlice(i, 0))
	}
	return out
}

// Load builds an index holding Objects(n).
func Load(n int) (*index.Index, error) {
	ix, err := index.New(Types)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for i, o := range Objects(n) {
		ix.Upsert(o.Type, o.ID, uint64(i+1), o.Obj)
	}
	return ix, nil
}

// Values are the values the templates read.
var Values = map[string]any{"maxconn": 50000, "timeout_client": "50s"}

// Snippets are the includable templates. ingress-backends renders the
// backends of the Ingress bound to `ingress`; host-map-entry its host map
// lines.
var Snippets = map[string]string{
	"ingress-backends": `
{%- macro backend_name(ing, svc, port) -%}
{{ ing.metadata.namespace }}_{{ ing.metadata.name }}_{{ svc }}_{{ port }}
{%- endmacro %}
{%- macro server(i, address, port, ready) -%}
server SRV_{{ i }} {{ address }}:{{ port }} check weight {{ 100 if ready else 0 }}{% if not ready %} disabled{% endif %}
{%- endmacro %}
{%- set ns = ingress.metadata.namespace %}
{%- set annotations = ingress.metadata.annotations | default({}, true) %}
{%- set balance = annotations.get('haproxy.org/load-balance', 'roundrobin') %}
{%- set timeout = annotations.get('haproxy.org/timeout-server') %}
{%- for rule in ingress.spec.rules | default([], true) %}
{%- if rule.http %}
{%- for path in rule.http.paths %}
{%- set svc_name = path.backend.service.name %}
{%- set want = path.backend.service.port.name | default(path.backend.service.port.number, true) %}
{%- set svcs = resources.services.get_indexed(ns, svc_name) %}
{%- if svcs | length == 0 %}
# {{ ns }}/{{ ingress.metadata.name }}: no service {{ svc_name }}
{%- else %}
{%- set ports = svcs[0].spec.ports | selectattr('name', 'equalto', want) | list %}
{%- if ports | length == 0 %}
{%- set ports = svcs[0].spec.ports | selectattr('port', 'equalto', want) | list %}
{%- endif %}
{%- set port = ports[0].targetPort if ports else want %}

backend {{ backend_name(ingress, svc_name, want) }}
    mode http
    balance {{ balance }}
    option httpchk GET {{ path.path | default('/') }}
    http-request set-header Host {{ rule.host | lower }}
{%- if timeout %}
    timeout server {{ timeout }}
{%- endif %}
{%- if ingress.spec.tls %}
    http-request redirect scheme https unless { ssl_fc }
{%- endif %}
{%- set servers = [] %}
{%- for slice in resources.endpoints.get_indexed(ns, svc_name) %}
{%- for ep in slice.endpoints | default([], true) %}
{%- for address in ep.addresses %}
{%- set _ = servers.append({'address': address, 'ep': ep}) %}
{%- endfor %}
{%- endfor %}
{%- endfor %}
{%- for s in servers %}
    {{ server(loop.index, s.address, port, s.ep.conditions.ready) }}
{%- else %}
    server SRV_1 127.0.0.1:1 disabled
{%- endfor %}
{%- endif %}
{%- endfor %}
{%- endif %}
{%- endfor %}
`,
	"host-map-entry": `
{%- for rule in ingress.spec.rules | default([], true) %}
{%- if rule.host %}
{{ rule.host | replace('*', '', 1) | lower }} {{ ingress.metadata.namespace }}_{{ ingress.metadata.name }}
{%- endif %}
{%- endfor %}
`,
}

const header = `global
    maxconn {{ values.maxconn }}
    log stdout len 4096 local0 info

defaults
    mode http
    timeout connect 5s
    timeout client {{ values.timeout_client }}
    timeout server 50s

frontend http
    bind *:80
    http-request set-var(txn.host) req.hdr(Host),field(1,:),lower
    use_backend %[var(txn.host),map(/etc/haproxy/maps/host.map)]
    default_backend default_backend
`

const footer = `
backend default_backend
    http-request return status 404
`

// Spec returns the workload's templates: with fragments, the per-Ingress
// parts are the fragments "backends" and "hosts", which the outputs join;
// without, the outputs loop over every Ingress.
func Spec(fragments bool) engine.Spec {
	spec := engine.Spec{Snippets: Snippets}
	if fragments {
		spec.Fragments = map[string]engine.Fragment{
			"backends": {ForEach: "ingresses", Text: `{% set ingress = obj %}{% include "ingress-backends" %}`},
			"hosts":    {ForEach: "ingresses", Text: `{% set ingress = obj %}{% include "host-map-entry" %}`},
		}
		spec.Outputs = []engine.Template{
			{Kind: engine.KindConfig, Name: "haproxy.cfg", Text: header + `{{ fragments("backends") }}` + footer},
			{Kind: engine.KindMap, Name: "host.map", Text: `{{ fragments("hosts") }}` + "\n"},
		}
		return spec
	}
	spec.Outputs = []engine.Template{
		{Kind: engine.KindConfig, Name: "haproxy.cfg", Text: header + `{% for _, ingress in resources.ingresses.items() %}{% include "ingress-backends" %}{% endfor %}` + footer},
		{Kind: engine.KindMap, Name: "host.map", Text: `{% for _, ingress in resources.ingresses.items() %}{% include "host-map-entry" %}{% endfor %}` + "\n"},
	}
	return spec
}
