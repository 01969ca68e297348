package library_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/library/librarytest"
)

// TestRedirectDecision checks who decides an Ingress's HTTPS redirects:
// the ssl_redirect option by default (the hosts of the Ingress's own
// spec.tls), overridden by its ssl-redirect annotation, with the code of
// its ssl-redirect-code annotation whichever asks; "@<backend>" stands for
// the catch-all default backend. An ssl-redirect "true" while no HTTPS
// listener is up is registered.
func TestRedirectDecision(t *testing.T) {
	const (
		app      = "ing_web_app_app_80"
		hostless = "ing_web_app_any_80"
		fallback = "ing_web_app_fallback_80"
		noTLS    = `ingress web/app: ssl-redirect annotation: no HTTPS listener is up (no TLS Secret is served); HTTP requests are not redirected`
	)
	cases := []struct {
		name        string
		opts        map[string]string
		annotations map[string]string
		tls         bool
		want        []string // the map's entries
		wantErr     string   // the registered ssl-redirect error, if any
	}{
		{name: "default: the TLS host's routes",
			tls:  true,
			want: []string{"app.example@" + app + " 308", "app.example@" + fallback + " 308"}},
		{name: "option off",
			opts: map[string]string{"ssl_redirect": "false"}, tls: true},
		{name: "annotation false overrides the default",
			annotations: map[string]string{"weft.io/ssl-redirect": "false"}, tls: true},
		{name: "annotation true overrides the option, every route",
			opts: map[string]string{"ssl_redirect": "false"}, annotations: map[string]string{"haproxy.org/ssl-redirect": "true"},
			want:    []string{"*@" + hostless + " 308", "*@" + fallback + " 308", "app.example@" + app + " 308", "app.example@" + fallback + " 308"},
			wantErr: noTLS},
		{name: "code alone sets the default's code",
			annotations: map[string]string{"weft.io/ssl-redirect-code": "307"}, tls: true,
			want: []string{"app.example@" + app + " 307", "app.example@" + fallback + " 307"}},
		{name: "code alone with the option off",
			opts: map[string]string{"ssl_redirect": "false"}, annotations: map[string]string{"weft.io/ssl-redirect-code": "301"}, tls: true},
		{name: "catch-all default backend (scope spec)",
			opts:        map[string]string{"default_backend_scope": "spec"},
			annotations: map[string]string{"weft.io/ssl-redirect": "true", "haproxy-ingress.github.io/ssl-redirect-code": "302"},
			want:        []string{"*@" + hostless + " 302", "@" + fallback + " 302", "app.example@" + app + " 302"},
			wantErr:     noTLS},
	}
	res := watched(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ann, tls strings.Builder
			if len(c.annotations) > 0 {
				ann.WriteString("  annotations:\n")
				for k, v := range c.annotations {
					fmt.Fprintf(&ann, "    %s: %q\n", k, v)
				}
			}
			if c.tls {
				tls.WriteString("  tls:\n    - hosts: [app.example]\n      secretName: app-tls\n")
			}
			objs := librarytest.ParseObjects(t, res, []byte(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app
  namespace: web
`+ann.String()+`spec:
  ingressClassName: weft
`+tls.String()+`  defaultBackend:
    service: {name: fallback, port: {number: 80}}
  rules:
    - host: app.example
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: app, port: {number: 80}}}}
    - http:
        paths:
          - {path: /any, pathType: Prefix, backend: {service: {name: any, port: {number: 80}}}}
`))
			r := librarytest.Render(t, ingressTarget(librarytest.GoldenBase, c.opts), librarytest.NewIndex(t, res, objs))
			var got []string
			for _, line := range strings.Split(librarytest.FileContent(r.Bundle, "maps/ingress-ssl-redirect.map"), "\n") {
				if line != "" && !strings.HasPrefix(line, "#") {
					got = append(got, line)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("ingress-ssl-redirect.map entries:\n got %q\nwant %q", got, c.want)
			}
			var gotErr string
			for _, e := range r.Errors {
				if strings.Contains(e.Message, "ssl-redirect") {
					gotErr = e.Message
				}
			}
			if gotErr != c.wantErr {
				t.Errorf("ssl-redirect error %q, want %q", gotErr, c.wantErr)
			}
		})
	}
}
