package library_test

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/library"
	"github.com/weftio/weft/pkg/render/library/librarytest"
	"github.com/weftio/weft/pkg/render/target"
)

func TestNames(t *testing.T) {
	if got := library.Names(); !slices.Equal(got, []string{"gateway", "ingress"}) {
		t.Fatalf("Names() = %v", got)
	}
	opts, err := library.Options("ingress")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ingress_class", "controller", "default_backend_scope", "http_port", "https_port", "bind_address", "server_slots", "tls_slots", "default_certificate", "ssl_redirect", "hsts", "hsts_max_age", "hsts_include_subdomains", "hsts_preload", "annotation_prefix", "backend_ca_slots", "admin_socket", "tunnel_timeout", "hard_stop_after"} {
		if o, ok := opts[n]; !ok || o.Doc == "" {
			t.Errorf("option %s: %+v, %v", n, o, ok)
		}
	}
}

func TestUnknownLibrary(t *testing.T) {
	tc := config.Target{Library: "nginx", Base: "/etc/haproxy"}
	err := library.Apply(&tc)
	if !errors.Is(err, library.ErrUnknown) || !strings.Contains(err.Error(), `"nginx"`) || !strings.Contains(err.Error(), "known: gateway, ingress") {
		t.Fatalf("Apply = %v", err)
	}
	_, err = target.Compile("edge", config.Target{Library: "nginx", Base: "/etc/haproxy"})
	if !errors.Is(err, library.ErrUnknown) || !strings.Contains(err.Error(), "target edge") {
		t.Fatalf("Compile = %v", err)
	}
}

func TestOptionErrors(t *testing.T) {
	cases := []struct {
		opts map[string]string
		want string
	}{
		{map[string]string{"ingres_class": "x"}, `no option "ingres_class" (known: admin_socket, annotation_prefix, backend_ca_slots, bind_address, controller, default_backend_scope, default_certificate, hard_stop_after, hsts, hsts_include_subdomains, hsts_max_age, hsts_preload, http_port, https_port, ingress_class, server_slots, ssl_redirect, tls_slots, tunnel_timeout)`},
		{map[string]string{"ingress_class": "Not A Name"}, "library_options.ingress_class"},
		{map[string]string{"http_port": "0"}, "library_options.http_port"},
		{map[string]string{"https_port": "https"}, "library_options.https_port"},
		{map[string]string{"server_slots": "0"}, "library_options.server_slots: \"0\" is not a number from 1 to 4096"},
		{map[string]string{"tls_slots": "-1"}, "library_options.tls_slots"},
		{map[string]string{"bind_address": "localhost"}, "library_options.bind_address"},
		{map[string]string{"admin_socket": "run/admin.sock"}, "library_options.admin_socket"},
		{map[string]string{"default_certificate": "just-a-name"}, "library_options.default_certificate"},
		{map[string]string{"tunnel_timeout": "0"}, "library_options.tunnel_timeout: \"0\" is not a number from 1 to 2147483"},
		{map[string]string{"hard_stop_after": "1h"}, "library_options.hard_stop_after"},
		{map[string]string{"ssl_redirect": "yes"}, `library_options.ssl_redirect: "yes" is not true or false`},
		{map[string]string{"hsts": "1"}, `library_options.hsts: "1" is not true or false`},
		{map[string]string{"hsts_max_age": "-5"}, "library_options.hsts_max_age"},
		{map[string]string{"default_backend_scope": "host"}, `library_options.default_backend_scope: "host" is not one of vhost, spec`},
		{map[string]string{"controller": "weft"}, `library_options.controller: "weft" is not a controller name`},
		{map[string]string{"controller": "Weft.io/x"}, "library_options.controller"},
		{map[string]string{"annotation_prefix": "weft.io"}, `library_options.annotation_prefix: "weft.io" is not an annotation prefix`},
		{map[string]string{"annotation_prefix": "Weft.IO/"}, "library_options.annotation_prefix"},
		{map[string]string{"annotation_prefix": "/"}, "library_options.annotation_prefix"},
		{map[string]string{"backend_ca_slots": "4097"}, "library_options.backend_ca_slots"},
	}
	for _, c := range cases {
		tc := config.Target{Library: "ingress", LibraryOptions: c.opts, Base: "/etc/haproxy"}
		err := library.Apply(&tc)
		if !errors.Is(err, library.ErrOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("options %v: err = %v, want one mentioning %q", c.opts, err, c.want)
		}
	}
}

// TestUserSectionsWin checks that a target's own sections replace the
// library's of the same name and that the rest is kept, without changing
// the maps the target held.
func TestUserSectionsWin(t *testing.T) {
	userSnippets := map[string]config.Template{
		"ingress-defaults-section": {Template: "defaults\n  mode http\n  timeout connect 1s\n  timeout client 2s\n  timeout server 3s"},
		"mine":                     {Template: "# mine"},
	}
	userMaps := map[string]config.Template{"extra.map": {Template: "a b\n"}}
	tc := config.Target{
		Library:          "ingress",
		LibraryOptions:   map[string]string{"http_port": "8080", "bind_address": "::1"},
		Base:             "/etc/haproxy",
		TemplateSnippets: userSnippets,
		Maps:             userMaps,
		Files:            map[string]config.Template{"ingress-crt-list": {Template: "# no TLS\n"}},
		Fragments:        map[string]config.Fragment{"names": {ForEach: "ingresses", Template: "{{ obj.metadata.name }}:{{ library_options.http_port }}\n"}},
	}
	if err := library.Apply(&tc); err != nil {
		t.Fatal(err)
	}
	if len(userSnippets) != 2 || len(userMaps) != 1 {
		t.Fatal("Apply changed the caller's maps")
	}
	if got := tc.TemplateSnippets["ingress-defaults-section"].Template; !strings.Contains(got, "timeout client 2s") {
		t.Errorf("user snippet replaced: %q", got)
	}
	for _, n := range []string{"mine", "ingress-routing", "ingress-parse"} {
		if _, ok := tc.TemplateSnippets[n]; !ok {
			t.Errorf("snippet %s missing", n)
		}
	}
	if _, ok := tc.Maps["ingress-prefix.map"]; !ok {
		t.Error("library map missing")
	}
	if !strings.HasSuffix(tc.Files["ingress-crt-list"].Template, "# no TLS\n") {
		t.Errorf("user file replaced: %q", tc.Files["ingress-crt-list"].Template)
	}
	if n := len(tc.Certificates); n != 64 {
		t.Errorf("%d certificate slots, want the default 64", n)
	}

	ix := librarytest.NewIndex(t, watched(t), librarytest.ParseObjects(t, watched(t), []byte(`
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: apps}
spec:
  ingressClassName: weft
  rules:
    - host: web.example
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
`)))
	res := librarytest.Render(t, tc, ix)
	cfg := librarytest.FileContent(res.Bundle, "haproxy.cfg")
	for _, want := range []string{"timeout client 2s", "bind [::1]:8080\n", "backend ing_apps_web_web_80"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, cfg)
		}
	}
	if got := librarytest.FileContent(res.Bundle, "maps/extra.map"); got != "a b\n" {
		t.Errorf("extra.map = %q", got)
	}
	if got := librarytest.FileContent(res.Bundle, "files/ingress-crt-list"); got != "# no TLS\n" {
		t.Errorf("crt-list = %q", got)
	}
}

// TestUserMainConfig checks that a user haproxy_config replaces the
// library's, sees library_options and can include the library's snippets,
// and that template errors keep their line numbers.
func TestUserMainConfig(t *testing.T) {
	main := `{% include "ingress-global-section" %}

{% include "ingress-defaults-section" %}

frontend mine
  bind :{{ library_options.http_port }}
{% include "ingress-routing" %}
  default_backend ingress_default
{{ fragments("ingress", "backends") }}
backend ingress_default
  http-request return status 404
`
	tc := ingressTarget("/etc/haproxy", map[string]string{"http_port": "8888"})
	tc.HAProxyConfig = config.Template{Template: main}
	ix := librarytest.NewIndex(t, watched(t), nil)
	res := librarytest.Render(t, tc, ix)
	cfg := librarytest.FileContent(res.Bundle, "haproxy.cfg")
	if !strings.Contains(cfg, "frontend mine\n  bind :8888\n") || !strings.Contains(cfg, "map_beg(/etc/haproxy/maps/ingress-prefix.map)") {
		t.Fatalf("haproxy.cfg:\n%s", cfg)
	}

	tc.HAProxyConfig = config.Template{Template: "global\n\n{{ nope( }}\n"}
	_, err := target.Compile("edge", tc)
	var te *engine.Error
	if !errors.As(err, &te) || te.Template != "haproxy.cfg" || te.Line != 3 {
		t.Fatalf("err = %v (%+v), want a syntax error on line 3 of haproxy.cfg", err, te)
	}
}

// TestIncremental checks that the per-Ingress work is in fragments: a
// change of one EndpointSlice re-renders only the backends of the Ingress
// that uses its Service, a Secret change only the TLS entries of the
// Ingresses that use it, and an Ingress change only that Ingress's
// entries.
func TestIncremental(t *testing.T) {
	tls := librarytest.Find(t, fixtures(t), "tls")
	ix := librarytest.NewIndex(t, watched(t), tls.Objects)
	renderOnce := librarytest.Incremental(t, ingressTarget(librarytest.GoldenBase, tls.Options), ix)
	// Two fragments per Ingress: ingress (maps and backends) and
	// ingress-tls (TLS entries).
	const entries = 2 * 4
	first := renderOnce()
	if first.FragmentsRendered != entries || first.FragmentsReused != 0 {
		t.Fatalf("first render: %d rendered, %d reused; want every entry of 2 fragments for 4 Ingresses rendered", first.FragmentsRendered, first.FragmentsReused)
	}
	rev := uint64(1000)
	step := func(what string, typ, ns, name string, change func(map[string]any), wantRendered int, wantIn map[string]string) {
		t.Helper()
		obj := tls.Object(t, typ, ns, name)
		if obj == nil {
			t.Fatalf("no %s %s/%s in the fixture", typ, ns, name)
		}
		change(obj)
		rev++
		if !ix.Upsert(typ, librarytest.ObjectID(typ, ns, name), rev, obj) {
			t.Fatalf("%s: upsert ignored", what)
		}
		r := renderOnce()
		if r.FragmentsRendered != wantRendered || r.FragmentsReused != entries-wantRendered {
			t.Errorf("%s: %d entries rendered, %d reused; want %d rendered", what, r.FragmentsRendered, r.FragmentsReused, wantRendered)
		}
		for p, want := range wantIn {
			if got := librarytest.FileContent(r.Bundle, p); !strings.Contains(got, want) {
				t.Errorf("%s: %s lacks %q:\n%s", what, p, want, got)
			}
		}
	}
	step("an endpoint added", "endpoints", "web", "other-1", func(o map[string]any) {
		o["endpoints"] = append(o["endpoints"].([]any), map[string]any{"addresses": []any{"10.11.0.4"}})
	}, 1, map[string]string{"haproxy.cfg": "server SRV_2 10.11.0.4:3000\n"})
	step("a Secret used by two Ingresses changed", "secrets", "web", "wild-tls", func(o map[string]any) {
		o["type"] = "Opaque"
	}, 2, map[string]string{"files/ingress-crt-list": "ingress-tls-1.pem foo.bar.com\ningress-tls-2.pem\n"})
	step("an Ingress changed", "ingresses", "web", "other", func(o map[string]any) {
		o["metadata"].(map[string]any)["labels"] = map[string]any{"changed": "yes"}
	}, 2, nil)
}

// TestMissingTypes checks that a configuration without the optional
// watched types still renders: without secrets the TLS entries, and
// without services and endpoints the backends, are registered as errors.
func TestMissingTypes(t *testing.T) {
	res := watched(t)
	objs := librarytest.ParseObjects(t, res, []byte(`
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: apps}
spec:
  ingressClassName: weft
  tls: [{secretName: web-tls}]
  rules:
    - host: web.example
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
`))
	only := map[string]config.Resource{"ingresses": res["ingresses"]}
	r := librarytest.Render(t, ingressTarget(librarytest.GoldenBase, nil), librarytest.NewIndex(t, only, objs))
	var msgs []string
	for _, e := range r.Errors {
		msgs = append(msgs, e.Message)
	}
	got := strings.Join(msgs, "\n")
	for _, want := range []string{"TLS secrets are not watched", "services and endpoints are not watched types"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
	if !strings.Contains(librarytest.FileContent(r.Bundle, "maps/ingress-prefix.map"), "web.example/ ing_apps_web_web_80\n") {
		t.Errorf("prefix map:\n%s", librarytest.FileContent(r.Bundle, "maps/ingress-prefix.map"))
	}
}

// TestConflictsIncremental checks that conflicts are settled again on
// incremental renders: when the oldest Ingress of a conflict goes, the
// next oldest serves the path and its error goes; when it comes back
// younger, it loses, and no map key is ever written twice.
func TestConflictsIncremental(t *testing.T) {
	f := librarytest.Find(t, fixtures(t), "conflicts")
	ix := librarytest.NewIndex(t, watched(t), f.Objects)
	renderOnce := librarytest.Incremental(t, ingressTarget(librarytest.GoldenBase, f.Options), ix)
	old := f.Object(t, "ingresses", "apps", "z-old")
	if old == nil {
		t.Fatal("no ingresses apps/z-old in the fixture")
	}
	oldID := librarytest.ObjectID("ingresses", "apps", "z-old")
	check := func(what, wantAPI string, wantErrFrom string) {
		t.Helper()
		r := renderOnce()
		for _, p := range []string{"maps/ingress-prefix.map", "maps/ingress-exact.map", "maps/ingress-default-backends.map", "maps/ingress-hosts.map"} {
			seen := map[string]bool{}
			for _, line := range strings.Split(librarytest.FileContent(r.Bundle, p), "\n") {
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				key, _, _ := strings.Cut(line, " ")
				if seen[key] {
					t.Errorf("%s: %s has the key %s twice", what, p, key)
				}
				seen[key] = true
			}
		}
		if got := librarytest.FileContent(r.Bundle, "maps/ingress-prefix.map"); !strings.Contains(got, "app.example/api/ "+wantAPI+"\n") {
			t.Errorf("%s: /api is not served by %s:\n%s", what, wantAPI, got)
		}
		var apiErr []string
		for _, e := range r.Errors {
			if strings.Contains(e.Message, `Prefix path "/api"`) {
				apiErr = append(apiErr, e.ID)
			}
		}
		if !slices.Equal(apiErr, []string{wantErrFrom}) {
			t.Errorf("%s: the /api conflict is registered against %v, want %s", what, apiErr, wantErrFrom)
		}
	}
	check("both", "ing_apps_z-old_old_8080", librarytest.ObjectID("ingresses", "apps", "a-new"))
	if !ix.Delete("ingresses", oldID, 1000) {
		t.Fatal("delete ignored")
	}
	r := renderOnce()
	if got := librarytest.FileContent(r.Bundle, "maps/ingress-prefix.map"); !strings.Contains(got, "app.example/api/ ing_apps_a-new_new_8080\n") {
		t.Errorf("z-old deleted: /api is not served by a-new:\n%s", got)
	}
	for _, e := range r.Errors {
		if strings.Contains(e.Message, "z-old") {
			t.Errorf("z-old deleted: error still registered: %s", e.Message)
		}
	}
	old["metadata"].(map[string]any)["creationTimestamp"] = "2026-01-01T00:00:00Z"
	if !ix.Upsert("ingresses", oldID, 1001, old) {
		t.Fatal("upsert ignored")
	}
	check("z-old recreated", "ing_apps_a-new_new_8080", oldID)
}

// TestIncrementalAnnotationSecrets checks that the Secrets an Ingress's
// annotations name are dependencies of its ingress entry: a changed
// basic-auth Secret or backend CA Secret renders that entry again, and
// only it, and the bundle follows.
func TestIncrementalAnnotationSecrets(t *testing.T) {
	ann := librarytest.Find(t, fixtures(t), "annotations")
	ix := librarytest.NewIndex(t, watched(t), ann.Objects)
	renderOnce := librarytest.Incremental(t, ingressTarget(librarytest.GoldenBase, ann.Options), ix)
	entries := renderOnce().FragmentsRendered
	secret := func(name string) map[string]any {
		s := ann.Object(t, "secrets", "web", name)
		if s == nil {
			t.Fatalf("no secret %s in the fixture", name)
		}
		return s
	}
	otherCA := secret("other-ca")["data"].(map[string]any)["ca.crt"].(string)
	otherPEM, err := base64.StdEncoding.DecodeString(otherCA)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		secret, key, value string // the Secret's data key and its new base64 value
		file, want         string // a bundle file and what it must then hold
	}{
		{"htpasswd", "auth", base64.StdEncoding.EncodeToString([]byte("carol:$5$salt$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ\n")),
			"haproxy.cfg", "  user carol password $5$salt$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ\n"},
		{"upstream-ca", "ca.crt", otherCA, "files/ingress-backend-ca-1.pem", strings.TrimSpace(string(otherPEM))},
	}
	for i, c := range cases {
		obj := secret(c.secret)
		obj["data"].(map[string]any)[c.key] = c.value
		if !ix.Upsert("secrets", librarytest.ObjectID("secrets", "web", c.secret), uint64(1000+i), obj) {
			t.Fatalf("%s: upsert ignored", c.secret)
		}
		r := renderOnce()
		if r.FragmentsRendered != 1 || r.FragmentsReused != entries-1 {
			t.Errorf("%s changed: %d entries rendered, %d reused; want 1 rendered", c.secret, r.FragmentsRendered, r.FragmentsReused)
		}
		if got := librarytest.FileContent(r.Bundle, c.file); !strings.Contains(got, c.want) {
			t.Errorf("%s changed: %s lacks %q:\n%s", c.secret, c.file, c.want, got)
		}
	}
}

// TestAnnotationPrefixIsAnotherSpelling checks that annotation_prefix set
// to haproxy.org/ reads that spelling's own names (server-proto, whitelist)
// besides ours, without registering them as unknown.
func TestAnnotationPrefixIsAnotherSpelling(t *testing.T) {
	res := watched(t)
	objs := librarytest.ParseObjects(t, res, []byte(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app
  namespace: web
  annotations:
    haproxy.org/server-proto: h2
    haproxy.org/whitelist: 10.0.0.0/8
    haproxy.org/load-balance: leastconn
spec:
  ingressClassName: weft
  defaultBackend:
    service:
      name: app
      port:
        number: 80
`))
	r := librarytest.Render(t, ingressTarget(librarytest.GoldenBase, map[string]string{"annotation_prefix": "haproxy.org/"}), librarytest.NewIndex(t, res, objs))
	cfg := librarytest.FileContent(r.Bundle, "haproxy.cfg")
	for _, want := range []string{"  balance leastconn\n", "deny deny_status 403 unless { src 10.0.0.0/8 }", " proto h2\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, cfg)
		}
	}
	for _, e := range r.Errors {
		if strings.Contains(e.Message, "annotation") {
			t.Errorf("error %q", e.Message)
		}
	}
}
