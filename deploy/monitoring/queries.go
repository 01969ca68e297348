package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Query is one PromQL expression of the dashboard or the rules.
type Query struct {
	// Where names the query's place: `panel "Title" query A`, `variable
	// "job"`, `alert WeftDeployFailing`.
	Where string
	// Expr is the expression, Grafana's variables replaced (see Expand).
	Expr string
	// Prints are the labels the query's output is expected to carry: the
	// {{label}}s of a panel's legend, the $labels.<label>s of an alert's
	// annotations, a variable's label_values label.
	Prints []string
}

// ErrNoQueries is a dashboard or rules file holding no query.
var ErrNoQueries = errors.New("no queries")

// grafanaBuiltins are the interval variables Grafana fills in, with a
// value of the kind Grafana gives them.
var grafanaBuiltins = strings.NewReplacer(
	"$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m",
	"$__range", "1h", "${__range}", "1h",
)

// variableRef is a reference to a dashboard variable: $name or ${name}.
var variableRef = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)

// Expand replaces Grafana's variables in expr so that it parses as PromQL:
// interval variables by a duration, the dashboard's own variables (used
// inside label matchers) by a plain value.
func Expand(expr string) string {
	return variableRef.ReplaceAllString(grafanaBuiltins.Replace(expr), "x")
}

// legendLabel is a {{label}} of a legend format.
var legendLabel = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// annotationLabel is a $labels.<label> of an alert annotation.
var annotationLabel = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)

// labelValues is a Grafana query variable: label_values(expr, label) or
// label_values(label).
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(?:(.*)\s*,\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a row's panels
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

type variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

// DashboardQueries returns every query of a Grafana dashboard (JSON):
// each target of each panel, rows' panels included, and each query
// variable's label_values.
func DashboardQueries(data []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var out []Query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				var prints []string
				for _, m := range legendLabel.FindAllStringSubmatch(t.LegendFormat, -1) {
					prints = append(prints, m[1])
				}
				out = append(out, Query{Where: fmt.Sprintf("panel %q query %s", p.Title, t.RefID), Expr: Expand(t.Expr), Prints: prints})
			}
		}
	}
	walk(d.Panels)
	var errs []error
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, q)
	}
	if len(out) == 0 && len(errs) == 0 {
		return nil, fmt.Errorf("dashboard: %w", ErrNoQueries)
	}
	return out, errors.Join(errs...)
}

// variableQuery is the query of a query variable, given as a string or as
// {"query": "..."}.
func variableQuery(v variable) (Query, error) {
	where := fmt.Sprintf("variable %q", v.Name)
	var text string
	if err := json.Unmarshal(v.Query, &text); err != nil {
		var obj struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &obj); err != nil {
			return Query{}, fmt.Errorf("%s: query: %w", where, err)
		}
		text = obj.Query
	}
	m := labelValues.FindStringSubmatch(text)
	if m == nil {
		return Query{}, fmt.Errorf("%s: %q is not label_values(expr, label)", where, text)
	}
	expr := m[1]
	if expr == "" {
		expr = `{__name__=~"weft_.+"}`
	}
	return Query{Where: where, Expr: Expand(expr), Prints: []string{m[2]}}, nil
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// RuleQueries returns the expression of every rule of a Prometheus rules
// file, with the labels its annotations print.
func RuleQueries(data []byte) ([]Query, error) {
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var out []Query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			if r.Alert == "" {
				where = "recording rule " + r.Record
			}
			var prints []string
			for _, text := range r.Annotations {
				for _, m := range annotationLabel.FindAllStringSubmatch(text, -1) {
					prints = append(prints, m[1])
				}
			}
			out = append(out, Query{Where: where, Expr: r.Expr, Prints: prints})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rules: %w", ErrNoQueries)
	}
	return out, nil
}
