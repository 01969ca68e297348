// Package library holds the template sets shipped with weft. A target
// names one with `library: <name>` and tunes it with `library_options`;
// target.Compile calls Apply, which fills the target's template sections
// from the library before they are compiled.
//
// # Contract of Apply
//
//   - The library provides snippets, fragments, maps, files, certificates
//     and haproxy_config. A section the target sets itself wins by name: a
//     snippet (by key or by its name field), fragment, map, file or
//     certificate of the same name replaces the library's, and a non-blank
//     haproxy_config replaces the library's main template. Everything else
//     the target sets is kept beside the library's sections.
//   - Options are checked against the library's declared options: an
//     unknown option, or a value of the wrong form, is an error naming the
//     option (and listing the known ones). Omitted options take their
//     defaults.
//   - Every output and fragment of the target (the user's too) sees the
//     options as the dict `library_options`, with ports and counts as
//     integers; the definition is prepended to the template on its first
//     line, so line numbers in template errors are unchanged.
//   - An unknown library name is an error listing the known ones.
//   - Apply does not modify the maps t held before the call: the target's
//     section maps are replaced by new ones.
//
// # The ingress library
//
// `library: ingress` implements Kubernetes networking.k8s.io/v1 Ingress as
// the ingress-controller-conformance suite checks it. It expects these
// watched resources, with these type names and index_by (the same block is
// in ingress/README.md):
//
//	watched_resources:
//	  ingresses:
//	    api_version: networking.k8s.io/v1
//	    kind: Ingress
//	    index_by: ["metadata.namespace", "metadata.name"]
//	  ingressclasses:
//	    api_version: networking.k8s.io/v1
//	    kind: IngressClass
//	    index_by: ["metadata.name"]
//	  services:
//	    api_version: v1
//	    kind: Service
//	    index_by: ["metadata.namespace", "metadata.name"]
//	  endpoints:
//	    api_version: discovery.k8s.io/v1
//	    kind: EndpointSlice
//	    index_by: ["metadata.namespace", "metadata.labels['kubernetes.io/service-name']"]
//	  secrets:
//	    api_version: v1
//	    kind: Secret
//	    index_by: ["metadata.namespace", "metadata.name"]
//
// Options (library_options): ingress_class (default "weft"), controller
// ("weft.io/ingress"), default_backend_scope ("vhost" or
// "spec"), http_port (80), https_port (443), ssl_redirect (true), hsts
// (false), hsts_max_age (31536000), hsts_include_subdomains and
// hsts_preload (false), bind_address ("" for every IPv4 address; an IPv4
// or IPv6 literal), server_slots (8), tls_slots (64), default_certificate
// ("<namespace>/<name>" of the Secret served without SNI; default the
// first by namespace and name), admin_socket (the path of an admin
// stats socket, for Runtime API updates; default none), tunnel_timeout
// (seconds an upgraded connection such as a WebSocket may stay idle; 3600),
// hard_stop_after (seconds a worker replaced by a reload keeps its open
// connections; 3600, 0 for until they end), annotation_prefix ("weft.io/",
// the prefix of the Ingress annotations the library reads besides their
// haproxy.org/ and haproxy-ingress.github.io/ spellings) and
// backend_ca_slots (16, how many backend CA Secrets can be served).
//
// Semantics:
//
//   - Class: a class name is ours when an IngressClass of that name has
//     spec.controller == controller, or when it is ingress_class (whether
//     or not it exists). An Ingress is served when spec.ingressClassName
//     is ours; without ingressClassName, when the legacy annotation
//     kubernetes.io/ingress.class is; without either, when an IngressClass
//     of ours carries ingressclass.kubernetes.io/is-default-class: "true".
//     Other Ingresses, and those naming a class that does not exist, are
//     ignored.
//   - Hosts: the Host header without its port and a trailing dot,
//     lowercased, is matched
//     exactly against the rule hosts; failing that, "*." and its parent
//     domain is matched against the wildcard hosts, so "*.foo.com" matches
//     "bar.foo.com" but neither "baz.bar.foo.com" nor "foo.com"; failing
//     that, the rules without host apply. Only the most specific vhost is
//     searched: a host with an exact rule never falls through to a
//     wildcard or host-less rule. Over TLS with SNI, a host other than the
//     server name is answered 421.
//   - Paths: the request path is normalized first (HAProxy normalize-uri:
//     unreserved percent-encodings decoded, "//" merged, "/./" and "/../"
//     resolved); rule paths no normalized path can have (those the API
//     server refuses for Exact and Prefix, and the like) are registered as
//     errors. Exact matches the request path exactly; Prefix (and
//     ImplementationSpecific) matches element-wise: "/foo" (or "/foo/")
//     matches "/foo", "/foo/" and "/foo/bar", not "/foobar", and "/"
//     matches every path. The longest match wins and Exact wins over
//     Prefix for the same path; paths are case-sensitive. Rules for the
//     same host merge across Ingresses.
//   - Conflicts: the same host, path and type in several Ingresses, or
//     competing default backends, go to the oldest Ingress
//     (creationTimestamp, then namespace, then name); the others are
//     registered as errors naming it, and no map key is written twice.
//   - Maps: ingress-hosts.map (rule host -> vhost), ingress-ssl-redirect.map
//     (<vhost>@<backend>, or @<backend> for the catch-all default backend,
//     -> redirect code), ingress-exact.map
//     (<vhost><path> of Exact paths), ingress-prefix.map (<vhost><path
//     without trailing slashes>/ of Prefix paths) and
//     ingress-default-backends.map (vhost -> defaultBackend); the vhost of
//     the rules without host is "*". The frontend looks up <vhost><path>
//     in the exact map, else <vhost><path>/ with map_beg in the prefix map:
//     every key ends with "/", so it matches only at a path element
//     boundary, and HAProxy keeps case-sensitive map_beg patterns in a
//     prefix tree and returns the longest matching key. An Exact match is
//     never shorter than a Prefix match of the same request, so trying it
//     first gives "longest wins, Exact before Prefix".
//   - Default backends (default_backend_scope vhost): a request for a
//     vhost that matches none of its paths goes to the defaultBackend of
//     the oldest Ingress with rules for that vhost; otherwise to the
//     defaultBackend of the oldest Ingress without rules; otherwise it
//     gets a 404. With default_backend_scope spec, every request no rule
//     matches goes to the oldest defaultBackend of any Ingress.
//   - Backends: one backend per service port an Ingress uses, named
//     ing_<namespace>_<ingress>_<service>_<port>. The Service port is found
//     by number or name; the EndpointSlice port with the same name gives
//     the target port; endpoints whose conditions.ready is false are left
//     out. A backend has server_slots times the smallest power of two slots
//     that hold its endpoints (SRV_1, SRV_2, ...); unused slots are
//     "127.0.0.1:1 disabled", so endpoint changes need no reload.
//   - TLS: each spec.tls entry's Secret (same namespace, type
//     kubernetes.io/tls) becomes certificate certs/ingress-tls-<n>.pem
//     (tls.crt and tls.key decoded), listed in files/ingress-crt-list with
//     the entry's hosts as SNI filters; the HTTPS listener exists while at
//     least one Secret is served. Routing is the same over HTTP and HTTPS,
//     with X-Forwarded-Proto set, except for HTTPS redirects. While the
//     HTTPS listener is up, an HTTP request is redirected to HTTPS when the
//     Ingress that serves it asks for it: by default (ssl_redirect) when the
//     Ingress lists the request's vhost in spec.tls; its ssl-redirect
//     annotation overrides that ("true": every request it serves, its
//     catch-all default backend too; "false": none), and its
//     ssl-redirect-code annotation sets the code (308 by default). One map
//     decides (ingress-ssl-redirect.map); with no HTTPS listener up, an
//     ssl-redirect "true" is registered as an error. With hsts, HTTPS
//     responses carry Strict-Transport-Security. A missing or malformed
//     Secret is registered against the Ingress and its entry skipped.
//   - Invalid parts of an Ingress (a bad host, pathType or path, a backend
//     without service name or port, a resource backend, a missing Service
//     or port, an endpoint address that is not an IP address; a namespace
//     or name that is not a Kubernetes name skips the whole Ingress) are
//     registered with register_error against the Ingress and skipped; the
//     render goes on.
//   - Annotations: metadata.annotations under annotation_prefix (else
//     haproxy.org/, else haproxy-ingress.github.io/) set timeouts, the
//     HTTPS redirect (see TLS), a path rewrite (of the normalized path), a
//     source allow-list, basic auth, the backend protocol and CA (one CA
//     file per Secret, backend_ca_slots of them), the balance algorithm,
//     cookie affinity, CORS, request and response headers, a rate limit
//     per source and a body size limit on the Ingress's own backends (see
//     ingress/README.md). An unknown name
//     under those prefixes or a malformed value is registered against the
//     Ingress and ignored; security settings that cannot be read fail
//     closed (403, 401, 503).
//   - Incremental rendering: the per-Ingress work is done in two
//     fragments (for_each: ingresses): `ingress` reads each Ingress once
//     and writes its map entries and backends as parts, `ingress-tls` its
//     TLS entries. An EndpointSlice change re-renders only the `ingress`
//     entries of the Ingresses that use its Service; a Secret change only
//     the `ingress-tls` entries of the Ingresses that use it for TLS and the
//     `ingress` entries of those whose annotations name it.
//
// # The gateway library
//
// `library: gateway` implements the Gateway API (gateway.networking.k8s.io/v1)
// for Gateways and HTTPRoutes; gateway/README.md documents its watched
// resources, options (controller_name, bind_address, tls_slots,
// admin_socket, and server_slots, tunnel_timeout and hard_stop_after as the
// ingress library has them) and semantics, and gateway/testdata holds its golden
// and real-traffic cases.
package library

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/config"
)

//go:embed ingress/library.yaml ingress/templates gateway/library.yaml gateway/templates
var embedded embed.FS

// ErrUnknown is matched by the error of Apply for a library that does not exist.
var ErrUnknown = errors.New("unknown library")

// ErrOption is matched by the errors of Apply about library_options.
var ErrOption = errors.New("invalid library option")

// manifest is a library's library.yaml.
type manifest struct {
	Options          map[string]Option   `json:"options"`
	Snippets         map[string]string   `json:"snippets"`
	Fragments        map[string]fragment `json:"fragments"`
	Maps             map[string]string   `json:"maps"`
	Files            map[string]string   `json:"files"`
	CertificateSlots *slots              `json:"certificate_slots,omitempty"`
	FileSlots        []slots             `json:"file_slots,omitempty"`
	HAProxyConfig    string              `json:"haproxy_config"`
}

type fragment struct {
	ForEach  string `json:"for_each"`
	Template string `json:"template"`
}

// slots declares Count (an option of type count) certificate outputs (or
// file outputs, for file_slots) named Name with {n} replaced by the slot
// number, 1-based.
type slots struct {
	Name     string `json:"name"`
	Count    string `json:"count"`
	Template string `json:"template"`
}

// Option types.
const (
	typeName           = "name"            // a DNS subdomain such as an IngressClass name
	typePort           = "port"            // 1-65535, an integer in templates
	typeCount          = "count"           // an integer within [Min, Max]
	typeAddress        = "address"         // "" or an IP literal; IPv6 is bracketed in templates
	typePath           = "path"            // "" or an absolute path without white space or quotes
	typeNamespacedName = "namespaced_name" // "" or <namespace>/<name>
	typeBool           = "bool"            // "true" or "false", a boolean in templates
	typeChoice         = "choice"          // one of Values
	typeController     = "controller"      // a domain-prefixed path (IngressClass spec.controller, GatewayClass spec.controllerName)
	typePrefix         = "prefix"          // an annotation prefix: a DNS subdomain and "/"
)

// Option is one declared library option.
type Option struct {
	Default string `json:"default"`
	Type    string `json:"type"`
	Min     int    `json:"min,omitempty"`
	Max     int    `json:"max,omitempty"`
	// Values are the allowed values of a choice option.
	Values []string `json:"values,omitempty"`
	Doc    string   `json:"doc"`
}

// library is a loaded library: its manifest and template texts.
type library struct {
	name  string
	m     manifest
	texts map[string]string // template file -> text
}

var load = sync.OnceValues(func() (map[string]*library, error) { return loadAll(embedded) })

// loadAll reads every library: each folder of fsys with a library.yaml.
func loadAll(fsys fs.FS) (map[string]*library, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	libs := map[string]*library{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		lib, err := loadOne(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("library %s: %w", e.Name(), err)
		}
		libs[e.Name()] = lib
	}
	return libs, nil
}

func loadOne(fsys fs.FS, name string) (*library, error) {
	data, err := fs.ReadFile(fsys, path.Join(name, "library.yaml"))
	if err != nil {
		return nil, err
	}
	lib := &library{name: name, texts: map[string]string{}}
	if err := yaml.UnmarshalStrict(data, &lib.m); err != nil {
		return nil, fmt.Errorf("library.yaml: %w", err)
	}
	files := slices.Collect(maps.Values(lib.m.Snippets))
	files = append(files, slices.Collect(maps.Values(lib.m.Maps))...)
	files = append(files, slices.Collect(maps.Values(lib.m.Files))...)
	for _, f := range lib.m.Fragments {
		files = append(files, f.Template)
	}
	if lib.m.HAProxyConfig == "" {
		return nil, errors.New("library.yaml: haproxy_config is required")
	}
	files = append(files, lib.m.HAProxyConfig)
	if s := lib.m.CertificateSlots; s != nil {
		o, ok := lib.m.Options[s.Count]
		if !ok || o.Type != typeCount || !strings.Contains(s.Name, "{n}") {
			return nil, fmt.Errorf("library.yaml: certificate_slots needs a name with {n} and a count option, got %+v", *s)
		}
		files = append(files, s.Template)
	}
	for _, s := range lib.m.FileSlots {
		o, ok := lib.m.Options[s.Count]
		if !ok || o.Type != typeCount || !strings.Contains(s.Name, "{n}") {
			return nil, fmt.Errorf("library.yaml: file_slots needs a name with {n} and a count option, got %+v", s)
		}
		files = append(files, s.Template)
	}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, path.Join(name, f))
		if err != nil {
			return nil, err
		}
		lib.texts[f] = string(b)
	}
	for n, o := range lib.m.Options {
		if _, err := o.value(o.Default); err != nil {
			return nil, fmt.Errorf("library.yaml: option %s: default: %w", n, err)
		}
	}
	return lib, nil
}

// Names returns the names of the libraries, sorted.
func Names() []string {
	libs, err := load()
	if err != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(libs))
}

// Options returns the options a library declares, by name.
func Options(name string) (map[string]Option, error) {
	lib, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return maps.Clone(lib.m.Options), nil
}

func lookup(name string) (*library, error) {
	libs, err := load()
	if err != nil {
		return nil, err
	}
	lib, ok := libs[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknown, name, strings.Join(slices.Sorted(maps.Keys(libs)), ", "))
	}
	return lib, nil
}

// Apply fills the template sections of t from the library t.Library (see
// the package documentation for the contract).
func Apply(t *config.Target) error {
	lib, err := lookup(t.Library)
	if err != nil {
		return err
	}
	opts, err := lib.options(t.LibraryOptions)
	if err != nil {
		return err
	}
	header := optionsHeader(opts)

	snippets := maps.Clone(t.TemplateSnippets)
	if snippets == nil {
		snippets = map[string]config.Template{}
	}
	userSnippet := map[string]bool{}
	for key, s := range snippets {
		userSnippet[key] = true
		if s.Name != "" {
			userSnippet[s.Name] = true
		}
	}
	for n, f := range lib.m.Snippets {
		if !userSnippet[n] {
			snippets[n] = config.Template{Template: lib.texts[f]}
		}
	}

	fragments := map[string]config.Fragment{}
	for n, f := range lib.m.Fragments {
		fragments[n] = config.Fragment{ForEach: f.ForEach, Template: lib.texts[f.Template]}
	}
	maps.Copy(fragments, t.Fragments)
	for n, f := range fragments {
		f.Template = header + f.Template
		fragments[n] = f
	}

	texts := func(files map[string]string) map[string]string {
		m := make(map[string]string, len(files))
		for n, f := range files {
			m[n] = lib.texts[f]
		}
		return m
	}
	certs := map[string]string{}
	if s := lib.m.CertificateSlots; s != nil {
		lib.addSlots(certs, *s, opts)
	}
	files := texts(lib.m.Files)
	for _, s := range lib.m.FileSlots {
		lib.addSlots(files, s, opts)
	}

	main := t.HAProxyConfig
	if strings.TrimSpace(main.Template) == "" {
		main = config.Template{Template: lib.texts[lib.m.HAProxyConfig]}
	}
	main.Template = header + main.Template

	t.TemplateSnippets, t.Fragments, t.HAProxyConfig = snippets, fragments, main
	t.Maps = merge(texts(lib.m.Maps), t.Maps, header)
	t.Files = merge(files, t.Files, header)
	t.Certificates = merge(certs, t.Certificates, header)
	return nil
}

// addSlots adds the outputs of the slots s to out (name -> text): one per
// slot, its template seeing the slot number as `slot`.
func (lib *library) addSlots(out map[string]string, s slots, opts map[string]any) {
	for i := 1; i <= opts[s.Count].(int); i++ {
		n := strings.ReplaceAll(s.Name, "{n}", strconv.Itoa(i))
		out[n] = fmt.Sprintf("{%%- set slot = %d %%}", i) + lib.texts[s.Template]
	}
}

// merge returns the library's templates (name -> text) with the user's
// replacing those of the same name, each with header prepended.
func merge(lib map[string]string, user map[string]config.Template, header string) map[string]config.Template {
	out := make(map[string]config.Template, len(lib)+len(user))
	for n, text := range lib {
		out[n] = config.Template{Template: text}
	}
	maps.Copy(out, user)
	for n, tpl := range out {
		tpl.Template = header + tpl.Template
		out[n] = tpl
	}
	return out
}

// options checks the target's library_options against the declared ones
// and returns every option's value: an int for ports and counts, a string
// otherwise.
func (lib *library) options(given map[string]string) (map[string]any, error) {
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(given)) {
		if _, ok := lib.m.Options[n]; !ok {
			errs = append(errs, fmt.Errorf("%w: library %s has no option %q (known: %s)", ErrOption, lib.name, n,
				strings.Join(slices.Sorted(maps.Keys(lib.m.Options)), ", ")))
		}
	}
	out := make(map[string]any, len(lib.m.Options))
	for _, n := range slices.Sorted(maps.Keys(lib.m.Options)) {
		o := lib.m.Options[n]
		raw, ok := given[n]
		if !ok {
			raw = o.Default
		}
		v, err := o.value(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: library_options.%s: %v", ErrOption, n, err))
			continue
		}
		out[n] = v
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

var (
	dnsName  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// controllerName is what the API server accepts in an IngressClass's
	// spec.controller and a GatewayClass's spec.controllerName: a DNS
	// subdomain, "/", and a path.
	controllerName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9/\-._~%!$&()*+,;=:]+$`)
)

// value checks raw against the option's type and converts it.
func (o Option) value(raw string) (any, error) {
	switch o.Type {
	case typeName:
		if len(raw) > 253 || !dnsName.MatchString(raw) {
			return nil, fmt.Errorf("%q is not a valid name (lowercase DNS subdomain)", raw)
		}
		return raw, nil
	case typePort:
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q is not a port number (1-65535)", raw)
		}
		return n, nil
	case typeCount:
		n, err := strconv.Atoi(raw)
		if err != nil || n < o.Min || n > o.Max {
			return nil, fmt.Errorf("%q is not a number from %d to %d", raw, o.Min, o.Max)
		}
		return n, nil
	case typeAddress:
		if raw == "" {
			return "", nil
		}
		a, err := netip.ParseAddr(raw)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is not an IP address", raw)
		}
		if a.Is6() && !a.Is4In6() {
			return "[" + a.String() + "]", nil
		}
		return a.Unmap().String(), nil
	case typePath:
		if raw != "" && (!strings.HasPrefix(raw, "/") || strings.ContainsAny(raw, " \t\r\n\"'\\#")) {
			return nil, fmt.Errorf("%q is not an absolute path without white space, quotes, backslashes or #", raw)
		}
		return raw, nil
	case typePrefix:
		name, ok := strings.CutSuffix(raw, "/")
		if !ok || len(name) > 253 || !dnsName.MatchString(name) {
			return nil, fmt.Errorf("%q is not an annotation prefix (a lowercase DNS subdomain followed by \"/\", such as weft.io/)", raw)
		}
		return raw, nil
	case typeNamespacedName:
		if raw == "" {
			return "", nil
		}
		ns, name, ok := strings.Cut(raw, "/")
		if !ok || !dnsLabel.MatchString(ns) || !dnsName.MatchString(name) {
			return nil, fmt.Errorf("%q is not <namespace>/<name>", raw)
		}
		return raw, nil
	case typeBool:
		if raw != "true" && raw != "false" {
			return nil, fmt.Errorf("%q is not true or false", raw)
		}
		return raw == "true", nil
	case typeChoice:
		if !slices.Contains(o.Values, raw) {
			return nil, fmt.Errorf("%q is not one of %s", raw, strings.Join(o.Values, ", "))
		}
		return raw, nil
	case typeController:
		if len(raw) > 253 || !controllerName.MatchString(raw) {
			return nil, fmt.Errorf("%q is not a controller name (<domain>/<path>)", raw)
		}
		return raw, nil
	}
	return nil, fmt.Errorf("unknown option type %q", o.Type)
}

// optionsHeader is the template text that binds library_options; it has no
// newline, so prepending it keeps line numbers.
func optionsHeader(opts map[string]any) string {
	var b strings.Builder
	b.WriteString("{%- set library_options = {")
	for i, n := range slices.Sorted(maps.Keys(opts)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
		b.WriteString(": ")
		switch v := opts[n].(type) {
		case int:
			b.WriteString(strconv.Itoa(v))
		case bool:
			b.WriteString(strconv.FormatBool(v))
		default:
			b.WriteString(strconv.Quote(fmt.Sprint(v)))
		}
	}
	b.WriteString("} %}")
	return b.String()
}
