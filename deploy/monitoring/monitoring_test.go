package monitoring_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"

	"github.com/weftio/weft/deploy/monitoring"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

const (
	dashboardFile = "weft-dashboard.json"
	rulesFile     = "weft-alerts.yaml"
	rulesTestFile = "weft-alerts.test.yaml"
)

// queries returns every query of the dashboard and the rules.
func queries(t *testing.T) []monitoring.Query {
	t.Helper()
	var out []monitoring.Query
	for file, read := range map[string]func([]byte) ([]monitoring.Query, error){
		dashboardFile: monitoring.DashboardQueries, rulesFile: monitoring.RuleQueries,
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := read(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i := range qs {
			qs[i].Where = file + ": " + qs[i].Where
		}
		out = append(out, qs...)
	}
	return out
}

// TestPromtool runs Prometheus's own checks on the rules: `promtool check
// rules` and the unit tests of every alert (`promtool test rules`).
func TestPromtool(t *testing.T) {
	promtool := testkit.Program(t, "promtool (apt-get install prometheus)", "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEveryAlertIsComplete: every alert has a severity, a summary, a
// description and a runbook hint, and promtool unit tests in which it
// fires and in which it does not.
func TestEveryAlertIsComplete(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	for file, v := range map[string]any{rulesFile: &rules, rulesTestFile: &tests} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			} else {
				quiet[at.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: %s has no test where it fires (%v) and one where it does not (%v)", r.Alert, rulesTestFile, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s holds no alert", rulesFile)
	}
}

// exposition is a /metrics answer of the shape weft's processes give, for
// the checker's own tests.
const exposition = `# HELP weft_renderer_renders_total Renders by target and outcome (published, unchanged, failed).
# TYPE weft_renderer_renders_total counter
weft_renderer_renders_total{outcome="published",target="edge"} 3
# HELP weft_renderer_render_duration_seconds Time to render a target.
# TYPE weft_renderer_render_duration_seconds histogram
weft_renderer_render_duration_seconds_bucket{target="edge",le="0.1"} 3
weft_renderer_render_duration_seconds_bucket{target="edge",le="+Inf"} 3
weft_renderer_render_duration_seconds_sum{target="edge"} 0.01
weft_renderer_render_duration_seconds_count{target="edge"} 3
# HELP weft_deployer_reloads_total Reloads.
# TYPE weft_deployer_reloads_total counter
weft_deployer_reloads_total{deploy_instance="local",reason="structure",target="edge"} 1
# HELP weft_renderer_dead_letters_total Dead letters.
# TYPE weft_renderer_dead_letters_total counter
weft_renderer_dead_letters_total{stage="changes"} 1
# HELP weft_ready Readiness.
# TYPE weft_ready gauge
weft_ready{check="nats"} 1
`

// TestCheck: the checker finds metrics and labels weft does not export,
// wherever a query names them, and nothing in queries that are right.
func TestCheck(t *testing.T) {
	e := monitoring.Exported{}
	if err := e.ParseExposition(strings.NewReader(exposition)); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		expr   string
		prints []string
		want   []string // what each error says, in order; none: no error
	}{
		{name: "right", expr: `sum by (target, outcome) (rate(weft_renderer_renders_total{outcome="failed", namespace=~"x"}[5m]))`, prints: []string{"target"}},
		{name: "a renamed metric", expr: `rate(weft_renderer_render_total[5m])`, want: []string{"metric weft_renderer_render_total is not exported by weft"}},
		{name: "a renamed metric in an aggregation", expr: `sum by (target) (increase(weft_deployer_reload_total[1h])) > 20`,
			want: []string{"metric weft_deployer_reload_total is not exported by weft"}},
		{name: "a renamed metric used twice is one error", expr: `rate(weft_renderer_render_total[5m]) or weft_renderer_render_total offset 5m`,
			want: []string{"metric weft_renderer_render_total is not exported by weft"}},
		{name: "a label the metric does not have", expr: `weft_deployer_reloads_total{instance_name="a"}`, want: []string{`label "instance_name" is not a label of weft_deployer_reloads_total`}},
		{name: "grouped by a label of none", expr: `sum by (deploy_instance) (weft_renderer_renders_total)`, want: []string{`groups by "deploy_instance"`}},
		{name: "a name pattern matching nothing", expr: `sum(increase({__name__=~"weft_.+_dead_letter_total"}[5m]))`, want: []string{`no metric weft exports matches __name__=~"weft_.+_dead_letter_total"`}},
		{name: "a name pattern", expr: `sum by (job, stage) (increase({__name__=~"weft_.+_dead_letters_total"}[5m]))`, prints: []string{"job", "stage"}},
		{name: "a histogram's buckets", expr: `histogram_quantile(0.95, sum by (target, le) (rate(weft_renderer_render_duration_seconds_bucket[5m])))`, prints: []string{"target"}},
		{name: "le printed after histogram_quantile", expr: `histogram_quantile(0.95, sum by (target, le) (rate(weft_renderer_render_duration_seconds_bucket[5m])))`, prints: []string{"le"},
			want: []string{`prints label "le", which its result does not have`}},
		{name: "a label dropped by the aggregation is printed", expr: `sum(rate(weft_renderer_renders_total[5m]))`, prints: []string{"target"}, want: []string{`prints label "target"`}},
		{name: "Prometheus's up", expr: `up{job=~"weft-.+"} == 0`, prints: []string{"job", "instance"}},
		{name: "matching on a label both sides have", expr: `sum by (namespace) (weft_renderer_renders_total) unless on (namespace) sum by (namespace) (weft_deployer_reloads_total)`, prints: []string{"namespace"}},
		{name: "matching on a label of neither side", expr: `weft_renderer_renders_total unless on (reason) weft_ready`,
			want: []string{`matches on "reason"`, `matches on "reason"`}},
		{name: "the union of or", expr: `sum by (target) (weft_renderer_renders_total) or sum by (stage) (weft_renderer_dead_letters_total)`, prints: []string{"target", "stage"}},
		{name: "a value the scrape showed", expr: `weft_renderer_dead_letters_total{stage="changes"}`},
		{name: "values the help lists", expr: `weft_renderer_renders_total{outcome=~"failed|unchanged"} unless weft_renderer_renders_total{outcome!="published"}`},
		{name: "a value neither shown nor listed", expr: `weft_renderer_renders_total{outcome="fail"}`,
			want: []string{`matches outcome="fail" of weft_renderer_renders_total, a value weft neither exported nor lists`}},
		{name: "an alternative neither shown nor listed", expr: `weft_deployer_reloads_total{reason=~"structure|structural"}`,
			want: []string{`matches reason="structural" of weft_deployer_reloads_total`}},
		{name: "a pattern is not a value", expr: `weft_renderer_dead_letters_total{stage=~"chan.*"}`},
		{name: "not PromQL", expr: `sum by (target (x)`, want: []string{"parse error"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := monitoring.Check(monitoring.Query{Where: "panel", Expr: c.expr, Prints: c.prints}, e)
			if len(errs) != len(c.want) {
				t.Fatalf("errors %v, want %d: %q", errs, len(c.want), c.want)
			}
			for i, err := range errs {
				if !errors.Is(err, monitoring.ErrBadQuery) || !strings.Contains(err.Error(), "panel: ") || !strings.Contains(err.Error(), c.want[i]) {
					t.Errorf("error %d = %v, want ErrBadQuery naming the panel and %q", i, err, c.want[i])
				}
			}
		})
	}
}

// TestDashboardQueries: every panel target and query variable is found,
// named by its panel, with Grafana's variables replaced.
func TestDashboardQueries(t *testing.T) {
	dash := `{"panels": [
	  {"type": "row", "title": "Renderer", "panels": [
	    {"title": "Renders", "targets": [{"refId": "A", "expr": "sum by (target) (rate(weft_renderer_renders_total{namespace=~\"$namespace\", job=~\"${job}\"}[$__rate_interval]))", "legendFormat": "{{target}} {{ outcome }}"}]}
	  ]},
	  {"title": "Ready", "targets": [{"refId": "B", "expr": "weft_ready"}]}
	],
	"templating": {"list": [
	  {"name": "datasource", "type": "datasource", "query": "prometheus"},
	  {"name": "namespace", "type": "query", "query": {"query": "label_values(weft_ready, namespace)"}},
	  {"name": "job", "type": "query", "query": "label_values(weft_ready{namespace=~\"$namespace\"}, job)"}
	]}}`
	got, err := monitoring.DashboardQueries([]byte(dash))
	if err != nil {
		t.Fatal(err)
	}
	want := []monitoring.Query{
		{Where: `panel "Renders" query A`, Expr: `sum by (target) (rate(weft_renderer_renders_total{namespace=~"x", job=~"x"}[5m]))`, Prints: []string{"target", "outcome"}},
		{Where: `panel "Ready" query B`, Expr: `weft_ready`},
		{Where: `variable "namespace"`, Expr: `weft_ready`, Prints: []string{"namespace"}},
		{Where: `variable "job"`, Expr: `weft_ready{namespace=~"x"}`, Prints: []string{"job"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("queries:\n%v\nwant\n%v", got, want)
	}
}

// TestQueriesMatchWhatWeftExports runs weft (`weft up --demo`: embedded
// NATS, every service, a real HAProxy fed by the runtime driver) on a copy
// of the quickstart and the puller's node agent beside it, makes a change
// go through to HAProxy, a manifest break and a message be dead-lettered,
// then scrapes both /metrics and checks every query of the dashboard and
// the rules against what they export: a query naming a metric, a label or
// a value weft does not export fails the test, naming the panel or alert.
// Then a real Prometheus scrapes both and evaluates every query and rule.
func TestQueriesMatchWhatWeftExports(t *testing.T) {
	testkit.HAProxy(t)
	qs := queries(t)
	weft := testkit.GoBuild(t, "github.com/weftio/weft/cmd/weft")
	puller := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")

	dir := t.TempDir()
	copyQuickstart(t, dir)
	natsPort, weftPort, agentPort := testkit.FreePort(t), testkit.FreePort(t), testkit.FreePort(t)
	up := testkit.StartProcess(t, weft, "up", "--demo", "--config", filepath.Join(dir, "weft.yaml"),
		"--nats-listen", "127.0.0.1:"+strconv.Itoa(natsPort), "--listen", "127.0.0.1:"+strconv.Itoa(weftPort))
	weftMetrics := "http://127.0.0.1:" + strconv.Itoa(weftPort) + "/metrics"
	waitFor(t, up, "the first deploy", func() error { return has(weftMetrics, "weft_deployer_deploys_total{", `outcome="applied"`) })

	// A change that goes through to HAProxy: a server's address, through
	// the Runtime API.
	edit(t, filepath.Join(dir, "manifests", "endpoints.yaml"), `addresses: ["127.0.0.2"]`, `addresses: ["127.0.0.3"]`)
	waitFor(t, up, "the change deployed", func() error {
		return hasValue(weftMetrics, "weft_deployer_runtime_ops_total{", func(v float64) bool { return v > 0 })
	})
	// A manifest that does not parse, and a message no service can decode.
	if err := os.WriteFile(filepath.Join(dir, "manifests", "broken.yaml"), []byte("apiVersion: v1\nkind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://127.0.0.1:" + strconv.Itoa(natsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(msg.ChangeSubject("manifests", "junk"), []byte("not a change")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, up, "a source error and a dead letter", func() error {
		return errors.Join(has(weftMetrics, "weft_watcher_source_errors_total{"), has(weftMetrics, "weft_renderer_dead_letters_total{"))
	})

	// The puller's node agent on weft's NATS; no container runtime is
	// needed for its metrics.
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fakeKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := testkit.StartProcess(t, puller, "agent", "--node", "node-1", "--nats-url", "nats://127.0.0.1:"+strconv.Itoa(natsPort),
		"--kubeconfig", kubeconfig, "--cri-socket", filepath.Join(dir, "no-runtime.sock"), "--listen", "127.0.0.1:"+strconv.Itoa(agentPort))
	agentMetrics := "http://127.0.0.1:" + strconv.Itoa(agentPort) + "/metrics"
	waitFor(t, agent, "the puller agent's metrics", func() error { return has(agentMetrics, "weft_puller_agent_pulls_total{") })

	exported := monitoring.Exported{}
	for _, url := range []string{weftMetrics, agentMetrics} {
		body, err := get(url)
		if err != nil {
			t.Fatal(err)
		}
		if err := exported.ParseExposition(strings.NewReader(body)); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	for _, q := range qs {
		for _, err := range monitoring.Check(q, exported) {
			t.Error(err)
		}
	}
	if t.Failed() {
		var names []string
		for n := range exported {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Fatalf("weft exports: %s", strings.Join(names, " "))
	}
	// And a real Prometheus evaluates every query on what it scrapes.
	evaluate(t, qs, map[string]string{
		"weft":              "127.0.0.1:" + strconv.Itoa(weftPort),
		"weft-puller-agent": "127.0.0.1:" + strconv.Itoa(agentPort),
	})
}

const fakeKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// copyQuickstart copies examples/quickstart into dir on ports of its own.
func copyQuickstart(t *testing.T, dir string) {
	t.Helper()
	src := filepath.Join("..", "..", "examples", "quickstart")
	for _, f := range []string{"weft.yaml", "manifests/blog.yaml", "manifests/endpoints.yaml", "manifests/shop.yaml"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit(t, filepath.Join(dir, "weft.yaml"), "bind 127.0.0.1:18080", "bind 127.0.0.1:"+strconv.Itoa(testkit.FreePort(t)))
	backend := "port: " + strconv.Itoa(testkit.FreePort(t))
	for _, f := range []string{"endpoints.yaml", "blog.yaml"} {
		for _, p := range []string{"port: 8080", "port: 9000", "port: 2368"} {
			editAll(t, filepath.Join(dir, "manifests", f), p, backend)
		}
	}
}

// edit replaces the first old in file by new; old must be there.
func edit(t *testing.T, file, old, new string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %q", file, old)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// editAll replaces every old in file by new.
func editAll(t *testing.T, file, old, new string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(string(data), old, new)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls f for up to 3 minutes (the first start of a race build is
// slow), failing early when p ended.
func waitFor(t *testing.T, p *testkit.Process, what string, f func() error) {
	t.Helper()
	testkit.Eventually(t, 3*time.Minute, func() error {
		if done, err := p.Exited(); done {
			t.Fatalf("waiting for %s: the process ended: %v", what, err)
		}
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

func get(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), err
}

// has reports whether a line of url's metrics starts with prefix and
// holds every one of also.
func has(url, prefix string, also ...string) error {
	return hasValue(url, prefix, func(float64) bool { return true }, also...)
}

// hasValue is has, for a line whose value ok accepts.
func hasValue(url, prefix string, ok func(float64) bool, also ...string) error {
	body, err := get(url)
	if err != nil {
		return err
	}
	s := bufio.NewScanner(strings.NewReader(body))
	s.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, a := range also {
			if !strings.Contains(line, a) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil && ok(v) {
			return nil
		}
	}
	return fmt.Errorf("no %s%v line yet", prefix, also)
}
