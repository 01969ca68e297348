package bench

import (
	"encoding/base64"
	"fmt"
	"path"
	"slices"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/library"
)

// The second workload is the ingress library itself (library: ingress)
// over the same Ingresses, Services and EndpointSlices, with the TLS
// Secret of every fourth Ingress and the watched types its README asks
// for.

// LibraryTypes are the watched types of the ingress library, with the
// index_by of its README.
var LibraryTypes = []index.Spec{
	{Type: "endpoints", IndexBy: []string{"metadata.namespace", "metadata.labels['kubernetes.io/service-name']"}},
	{Type: "ingressclasses", IndexBy: []string{"metadata.name"}},
	{Type: "ingresses", IndexBy: []string{"metadata.namespace", "metadata.name"}},
	{Type: "secrets", IndexBy: []string{"metadata.namespace", "metadata.name"}},
	{Type: "services", IndexBy: []string{"metadata.namespace", "metadata.name"}},
}

// LibraryBase is the base the library workload's bundle is rendered for.
const LibraryBase = "/etc/haproxy"

// LibraryTarget is the target that renders the workload with the ingress
// library (the workload's Ingresses name the class "haproxy").
func LibraryTarget() config.Target {
	return config.Target{Library: "ingress", LibraryOptions: map[string]string{"ingress_class": "haproxy"}, Base: LibraryBase}
}

// fakePEM is a certificate and key as far as the library checks them (the
// PEM markers); nothing parses them in the benchmarks.
const fakePEM = "-----BEGIN %s-----\nMIIB%05d\n-----END %[1]s-----\n"

// Secret returns the TLS Secret of the i-th Ingress (which has TLS when
// i%4 == 0).
func Secret(i int) Object {
	ns, n := name(i)
	return Object{Type: "secrets", ID: ns + "/" + n + "-tls", Obj: map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"type":       "kubernetes.io/tls",
		"metadata":   map[string]any{"namespace": ns, "name": n + "-tls"},
		"data": map[string]any{
			"tls.crt": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, fakePEM, "CERTIFICATE", i)),
			"tls.key": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, fakePEM, "PRIVATE KEY", i)),
		},
	}}
}

// LibraryObjects returns Objects(n) and the Secrets of the Ingresses with TLS.
func LibraryObjects(n int) []Object {
	out := Objects(n)
	for i := 0; i < n; i += 4 {
		out = append(out, Secret(i))
	}
	return out
}

// LoadLibrary builds an index of the library's types holding
// LibraryObjects(n).
func LoadLibrary(n int) (*index.Index, error) {
	ix, err := index.New(LibraryTypes)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for i, o := range LibraryObjects(n) {
		ix.Upsert(o.Type, o.ID, uint64(i+1), o.Obj)
	}
	return ix, nil
}

var outputDirs = map[engine.Kind]string{engine.KindMap: "maps", engine.KindFile: "files", engine.KindCert: "certs"}

// LibrarySpec returns what target.Compile compiles for LibraryTarget(): the
// library's snippets, fragments and outputs, in the target's output order
// (maps, files, certificates by name, then haproxy.cfg), and where each
// output is deployed (kind, NUL, name -> absolute path: get_path).
func LibrarySpec() (engine.Spec, map[string]string, error) {
	t := LibraryTarget()
	if err := library.Apply(&t); err != nil {
		return engine.Spec{}, nil, fmt.Errorf("bench: %w", err)
	}
	spec := engine.Spec{Snippets: map[string]string{}, Fragments: map[string]engine.Fragment{}}
	for n, s := range t.TemplateSnippets {
		spec.Snippets[n] = s.Template
	}
	for n, f := range t.Fragments {
		spec.Fragments[n] = engine.Fragment{ForEach: f.ForEach, Text: f.Template}
	}
	paths := map[string]string{}
	for _, g := range []struct {
		kind      engine.Kind
		templates map[string]config.Template
	}{{engine.KindMap, t.Maps}, {engine.KindFile, t.Files}, {engine.KindCert, t.Certificates}} {
		names := make([]string, 0, len(g.templates))
		for n := range g.templates {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			spec.Outputs = append(spec.Outputs, engine.Template{Kind: g.kind, Name: n, Text: g.templates[n].Template})
			paths[pathKey(g.kind, n)] = path.Join(t.Base, outputDirs[g.kind], n)
		}
	}
	spec.Outputs = append(spec.Outputs, engine.Template{Kind: engine.KindConfig, Name: "haproxy.cfg", Text: t.HAProxyConfig.Template})
	paths[pathKey(engine.KindConfig, "haproxy.cfg")] = path.Join(t.Base, "haproxy.cfg")
	return spec, paths, nil
}

func pathKey(kind engine.Kind, name string) string { return string(kind) + "\x00" + name }

// PathFunc answers get_path from paths (see LibrarySpec).
func PathFunc(paths map[string]string) func(engine.Kind, string) (string, error) {
	return func(kind engine.Kind, name string) (string, error) {
		p, ok := paths[pathKey(kind, name)]
		if !ok {
			return "", fmt.Errorf("no %s %q", kind, name)
		}
		return p, nil
	}
}
