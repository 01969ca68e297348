package kind_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/validator/kind"
)

func TestPolicyCheck(t *testing.T) {
	cases := []struct {
		name   string
		policy kind.Policy
		errs   []string // parts of the error, in order; none means valid
	}{
		{name: "empty policy allows everything"},
		{name: "valid rules", policy: kind.Policy{
			Forbid:      []kind.ForbidRule{{Directive: `^option httpclose\b`, Section: "backend", Reason: "use http-server-close"}},
			MaxBackends: 10, MaxServersPerBackend: 5, MaxMapEntries: 100,
			RequireInDefaults: []string{"timeout connect"},
		}},
		{name: "bad regexp names the rule", policy: kind.Policy{Forbid: []kind.ForbidRule{
			{Directive: "^ok$", Reason: "r"},
			{Directive: "^server (", Reason: "r"},
		}}, errs: []string{`forbid[1] ("^server ("): error parsing regexp: missing closing )`}},
		{name: "empty directive and reason, unknown section", policy: kind.Policy{Forbid: []kind.ForbidRule{
			{Directive: " ", Section: "backends"},
		}}, errs: []string{"forbid[0]: directive is empty", `forbid[0] (" "): unknown section type "backends"`, `forbid[0] (" "): reason is empty`}},
		{name: "negative limits and empty requirement", policy: kind.Policy{
			MaxBackends: -1, MaxServersPerBackend: -2, MaxMapEntries: -3, RequireInDefaults: []string{"timeout connect", ""},
		}, errs: []string{"max_backends is negative (-1)", "max_servers_per_backend is negative (-2)", "max_map_entries is negative (-3)", "require_in_defaults[1] is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.policy.Check()
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("Check() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, kind.ErrInvalidPolicy) {
				t.Fatalf("Check() = %v, want an error wrapping ErrInvalidPolicy", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.errs) {
				t.Fatalf("Check() = %q, want %d errors", lines, len(tc.errs))
			}
			for i, want := range tc.errs {
				if !strings.Contains(lines[i], want) {
					t.Errorf("error %d = %q, want it to contain %q", i, lines[i], want)
				}
			}
		})
	}
}

func TestPolicyJSON(t *testing.T) {
	const in = `{"forbid":[{"directive":"^option httpclose","section":"backend","reason":"no"}],
		"max_backends":2,"max_servers_per_backend":3,"max_map_entries":4,"require_in_defaults":["timeout connect"]}`
	var p kind.Policy
	if err := json.Unmarshal([]byte(in), &p); err != nil {
		t.Fatal(err)
	}
	want := kind.Policy{
		Forbid:      []kind.ForbidRule{{Directive: "^option httpclose", Section: "backend", Reason: "no"}},
		MaxBackends: 2, MaxServersPerBackend: 3, MaxMapEntries: 4, RequireInDefaults: []string{"timeout connect"},
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("decoded %+v, want %+v", p, want)
	}
}

const policyConfig = `global
  log stdout format raw local0

defaults
  mode http
  option httpclose
  timeout connect 5s
  timeout client 50s

frontend fe
  bind 127.0.0.1:8080
  http-request set-header X-Debug 1   # debugging
  default_backend be_a

backend be_a
  option httpclose
  server s1 10.0.0.1:80
  server s2 10.0.0.2:80
  server s3 10.0.0.3:80

backend be_b
  server-template web 1-4 10.0.1.1:80

listen be_c
  bind 127.0.0.1:9000
  server s1 10.0.2.1:80
`

func TestPolicyChecker(t *testing.T) {
	cases := []struct {
		name   string
		policy kind.Policy
		maps   string
		want   []string // "file:line:part of the message"
	}{
		{name: "no rules", policy: kind.Policy{}},
		{name: "forbidden directive in any section names the reason", policy: kind.Policy{Forbid: []kind.ForbidRule{
			{Directive: `^option httpclose$`, Reason: "closes keep-alive connections"},
		}}, want: []string{
			`haproxy.cfg:6:"option httpclose" is forbidden in defaults: closes keep-alive connections`,
			`haproxy.cfg:16:"option httpclose" is forbidden in backend be_a: closes keep-alive connections`,
		}},
		{name: "forbidden directive limited to a section, matched without its comment", policy: kind.Policy{Forbid: []kind.ForbidRule{
			{Directive: `^option httpclose$`, Section: "backend", Reason: "r1"},
			{Directive: `X-Debug 1$`, Section: "frontend", Reason: "no debug headers"},
			{Directive: `X-Debug`, Section: "backend", Reason: "never matches"},
		}}, want: []string{
			`haproxy.cfg:12:"http-request set-header X-Debug 1" is forbidden in frontend fe: no debug headers`,
			`haproxy.cfg:16:"option httpclose" is forbidden in backend be_a: r1`,
		}},
		{name: "section headers are directives", policy: kind.Policy{Forbid: []kind.ForbidRule{
			{Directive: `^listen `, Reason: "use frontend and backend"},
		}}, want: []string{`haproxy.cfg:24:"listen be_c" is forbidden in listen be_c: use frontend and backend`}},
		{name: "backends and listen sections count as backends", policy: kind.Policy{MaxBackends: 2},
			want: []string{`haproxy.cfg:24:more than 2 backends (the policy's max_backends): listen "be_c" is backend 3`}},
		{name: "backend limit not reached", policy: kind.Policy{MaxBackends: 3}},
		{name: "servers per backend, server-template counts its servers", policy: kind.Policy{MaxServersPerBackend: 2},
			want: []string{
				`haproxy.cfg:19:backend "be_a" has more than 2 servers`,
				`haproxy.cfg:22:backend "be_b" has more than 2 servers`,
			}},
		{name: "servers per backend at the limit", policy: kind.Policy{MaxServersPerBackend: 4}},
		{name: "map entries, comments and blank lines not counted", policy: kind.Policy{MaxMapEntries: 2},
			maps: "# hosts\na.example.com be_a\n\nb.example.com be_b\nc.example.com be_c\nd.example.com be_c\n",
			want: []string{"maps/hosts.map:5:map has more than 2 entries (the policy's max_map_entries); this is entry 3"}},
		{name: "map entries at the limit", policy: kind.Policy{MaxMapEntries: 2}, maps: "a b\n# c d\nb c\n"},
		{name: "required in defaults", policy: kind.Policy{RequireInDefaults: []string{"timeout connect", "timeout  server", "mode"}},
			want: []string{`haproxy.cfg:4:defaults section (unnamed) lacks "timeout server", which the policy requires`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.policy.Check(); err != nil {
				t.Fatal(err)
			}
			files := []msg.BundleFile{{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte(policyConfig)}}
			if tc.maps != "" {
				files = append(files, msg.BundleFile{Path: "maps/hosts.map", Kind: msg.FileMap, Content: []byte(tc.maps)})
			}
			b, err := msg.NewBundle("t", fixtureBase, "haproxy.cfg", files)
			if err != nil {
				t.Fatal(err)
			}
			ps, err := kind.PolicyChecker{Rules: tc.policy}.Check(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				if p.Severity != "error" {
					t.Errorf("severity %q, want error", p.Severity)
				}
				got = append(got, fmt.Sprintf("%s:%d:%s", p.File, p.Line, p.Message))
			}
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.HasPrefix(got[i], tc.want[i])
			}
			if !ok {
				t.Fatalf("problems:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(tc.want, "\n\t"))
			}
		})
	}
}

func TestPolicyCheckerDefaults(t *testing.T) {
	p := kind.PolicyChecker{Rules: kind.Policy{RequireInDefaults: []string{"timeout connect"}}}
	cases := []struct {
		name, cfg string
		want      []string
	}{
		{"no defaults section", "global\nfrontend f\n  bind :80\n", []string{`haproxy.cfg:0:no defaults section, but the policy requires one holding "timeout connect"`}},
		{"each defaults section", "defaults a\n  timeout connect 5s\ndefaults b\n  mode http\ndefaults\n  timeout connect 1s\n",
			[]string{`haproxy.cfg:3:defaults section "b" lacks "timeout connect"`}},
		{"prefix of a word does not count", "defaults\n  timeout connection 5s\n", []string{`haproxy.cfg:1:defaults section (unnamed) lacks "timeout connect"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := p.Check(context.Background(), bundleOf(t, tc.cfg))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, fmt.Sprintf("%s:%d:%s", p.File, p.Line, p.Message))
			}
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.HasPrefix(got[i], tc.want[i])
			}
			if !ok {
				t.Fatalf("problems %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPolicyCheckerInvalidRules(t *testing.T) {
	pc := kind.PolicyChecker{Rules: kind.Policy{Forbid: []kind.ForbidRule{{Directive: "(", Reason: "r"}}}}
	if pc.Name() != "policy" {
		t.Fatalf("Name() = %q", pc.Name())
	}
	_, err := pc.Check(context.Background(), bundleOf(t, "global\n"))
	if !errors.Is(err, kind.ErrInvalidPolicy) || !strings.Contains(err.Error(), `forbid[0] ("(")`) {
		t.Fatalf("Check with a bad rule = %v, want ErrInvalidPolicy naming the rule", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (kind.PolicyChecker{}).Check(ctx, bundleOf(t, "global\n")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
