package monitoring_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/weftio/weft/deploy/monitoring"
	"github.com/weftio/weft/pkg/testkit"
)

// prometheus is a real Prometheus server (Debian's) scraping weft's
// processes every second and evaluating weft-alerts.yaml.
type prometheus struct {
	proc *testkit.Process
	api  string
}

// startPrometheus starts Prometheus on targets: job name -> host:port.
func startPrometheus(t *testing.T, targets map[string]string) *prometheus {
	t.Helper()
	bin := testkit.Program(t, "prometheus (apt-get install prometheus)", "prometheus")
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [%q]\nscrape_configs:\n", rules)
	for job, addr := range targets {
		cfg += fmt.Sprintf("- job_name: %s\n  static_configs: [{targets: [%q]}]\n", job, addr)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port := testkit.FreePort(t)
	p := &prometheus{api: "http://127.0.0.1:" + strconv.Itoa(port) + "/api/v1/"}
	p.proc = testkit.StartProcess(t, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
	return p
}

// apiAnswer is the envelope of Prometheus's HTTP API.
type apiAnswer struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

// call GETs path of the API and returns its data, or the API's error.
func (p *prometheus) call(path string) (json.RawMessage, error) {
	body, err := get(p.api + path)
	if err != nil {
		return nil, err
	}
	var a apiAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if a.Status != "success" {
		return nil, fmt.Errorf("%s: %s", path, a.Error)
	}
	return a.Data, nil
}

// query evaluates expr now and returns how many series it gave.
func (p *prometheus) query(expr string) (int, error) {
	data, err := p.call("query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	var v struct {
		Result []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, err
	}
	return len(v.Result), nil
}

type ruleState struct {
	Name      string `json:"name"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	State     string `json:"state"`
	Alerts    []struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	} `json:"alerts"`
}

// rules returns every rule as Prometheus last evaluated it.
func (p *prometheus) rules() ([]ruleState, error) {
	data, err := p.call("rules")
	if err != nil {
		return nil, err
	}
	var v struct {
		Groups []struct {
			Rules []ruleState `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	var out []ruleState
	for _, g := range v.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// evaluate has Prometheus scrape weft's processes and checks that every
// query of the dashboard evaluates, every alert rule evaluates without
// error, and that on this healthy weft, which dead-lettered one message,
// WeftDeadLetters fires and WeftServiceDown does not.
func evaluate(t *testing.T, qs []monitoring.Query, targets map[string]string) {
	t.Helper()
	p := startPrometheus(t, targets)
	waitFor(t, p.proc, "Prometheus scraping weft", func() error {
		n, err := p.query(`up == 1`)
		if err != nil {
			return err
		}
		if n != len(targets) {
			return fmt.Errorf("%d of %d targets up", n, len(targets))
		}
		return nil
	})
	for _, q := range qs {
		if _, err := p.query(q.Expr); err != nil {
			t.Errorf("%s: Prometheus cannot evaluate %s: %v", q.Where, q.Expr, err)
		}
	}
	waitFor(t, p.proc, "every rule evaluated, WeftDeadLetters firing", func() error {
		rules, err := p.rules()
		if err != nil {
			return err
		}
		var errs []error
		firing := map[string]bool{}
		for _, r := range rules {
			switch {
			case r.Health == "err":
				t.Fatalf("alert %s: Prometheus cannot evaluate it: %s", r.Name, r.LastError)
			case r.Health != "ok":
				errs = append(errs, fmt.Errorf("alert %s not evaluated yet (%s)", r.Name, r.Health))
			}
			for _, a := range r.Alerts {
				if a.State == "firing" {
					firing[r.Name+"/"+a.Labels["stage"]] = true
				}
			}
		}
		if !firing["WeftDeadLetters/changes"] {
			errs = append(errs, fmt.Errorf("WeftDeadLetters does not fire for the dead-lettered change (firing: %v)", firing))
		}
		if firing["WeftServiceDown/"] {
			t.Fatalf("WeftServiceDown fires while every process is up")
		}
		if len(errs) == 0 {
			t.Logf("Prometheus evaluated %d queries and %d rules; firing: %v", len(qs), len(rules), firing)
		}
		return errors.Join(errs...)
	})
}
