package monitoring

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Exported is what weft's processes export, by series name (a
// histogram's _bucket, _sum and _count, a counter's name with _total).
type Exported map[string]*Series

// Series is what is known of the series of one name.
type Series struct {
	// Labels are the series' label names, each with the values seen.
	Labels map[string]map[string]bool
	// Help is the metric's HELP text, which lists the values a label can
	// take that a scrape may not show yet ("by outcome (applied,
	// unchanged, skipped, failed)").
	Help string
}

// TargetLabels are the labels Prometheus adds to every series it scrapes:
// job and instance, and those a Kubernetes ServiceMonitor adds.
var TargetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// scrapeSeries are series Prometheus makes for every scrape target.
var scrapeSeries = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling", "scrape_series_added"}

// ErrBadQuery is a query that does not parse, or that names what weft does
// not export.
var ErrBadQuery = errors.New("bad query")

// ParseExposition adds the series of a /metrics answer (the text format)
// to e.
func (e Exported) ParseExposition(r io.Reader) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("metrics exposition: %w", err)
	}
	for name, f := range families {
		var pairs []*dto.LabelPair
		add := func(series string, extra ...string) {
			s := e[series]
			if s == nil {
				s = &Series{Labels: map[string]map[string]bool{}, Help: f.GetHelp()}
				e[series] = s
			}
			for _, l := range pairs {
				if s.Labels[l.GetName()] == nil {
					s.Labels[l.GetName()] = map[string]bool{}
				}
				s.Labels[l.GetName()][l.GetValue()] = true
			}
			for _, n := range extra {
				if s.Labels[n] == nil {
					s.Labels[n] = map[string]bool{}
				}
			}
		}
		for _, m := range f.GetMetric() {
			pairs = m.GetLabel()
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name+"_bucket", "le")
				add(name + "_sum")
				add(name + "_count")
			case dto.MetricType_SUMMARY:
				add(name, "quantile")
				add(name + "_sum")
				add(name + "_count")
			default:
				add(name)
			}
		}
	}
	return nil
}

// Check parses q and reports, each as an error wrapping ErrBadQuery and
// naming q.Where: a selector that selects no series weft exports (a metric
// name, or a __name__ pattern matching none); a label matched, grouped by
// (by, on, group_left/right) or printed (q.Prints) that none of the
// metrics beneath it has and Prometheus does not add (TargetLabels); a
// value a selector names (=, != or =~, !~ with alternatives such as
// "applied|unchanged") that the metric neither showed nor lists in its
// HELP text.
func Check(q Query, e Exported) []error {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q.Expr)
	if err != nil {
		return []error{fmt.Errorf("%w: %s: %s: %w", ErrBadQuery, q.Where, q.Expr, err)}
	}
	c := checker{q: q, e: e}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		c.node(n)
		return nil
	})
	if out, known := c.output(expr); known {
		for _, l := range q.Prints {
			if !out[l] {
				c.fail("prints label %q, which its result does not have (it has: %s)", l, list(out))
			}
		}
	}
	return c.errs
}

// exported reports whether every metric s selects is exported: label
// checks above a selector that is not are left out (its own error says
// why).
func (c *checker) exported(s *parser.VectorSelector) bool {
	names, pattern := c.names(s)
	if pattern != "" && len(names) == 0 {
		return false
	}
	for _, n := range names {
		if _, ok := c.e[n]; !ok && !slices.Contains(scrapeSeries, n) {
			return false
		}
	}
	return true
}

type checker struct {
	q    Query
	e    Exported
	errs []error
}

// fail records a problem once: a selector used twice is one problem.
func (c *checker) fail(format string, args ...any) {
	err := fmt.Errorf("%w: %s: %s", ErrBadQuery, c.q.Where, fmt.Sprintf(format, args...))
	for _, e := range c.errs {
		if e.Error() == err.Error() {
			return
		}
	}
	c.errs = append(c.errs, err)
}

// node checks one node of the expression.
func (c *checker) node(n parser.Node) {
	switch n := n.(type) {
	case *parser.VectorSelector:
		c.selector(n)
	case *parser.AggregateExpr:
		if !n.Without {
			c.labelsOf(n.Expr, n.Grouping, "groups by")
		}
	case *parser.BinaryExpr:
		if m := n.VectorMatching; m != nil && m.On {
			c.labelsOf(n.LHS, m.MatchingLabels, "matches on")
			c.labelsOf(n.RHS, m.MatchingLabels, "matches on")
		}
		if m := n.VectorMatching; m != nil && len(m.Include) > 0 {
			side := n.RHS
			if m.Card == parser.CardOneToMany {
				side = n.LHS
			}
			c.labelsOf(side, m.Include, "includes")
		}
	}
}

// selector checks that s selects a metric weft exports and that each label
// it matches is a label of such a metric.
func (c *checker) selector(s *parser.VectorSelector) {
	names, pattern := c.names(s)
	if !c.exported(s) {
		if pattern != "" {
			c.fail("no metric weft exports matches %s", pattern)
		} else {
			c.fail("metric %s is not exported by weft", s.Name)
		}
		return
	}
	have := c.selectorLabels(names)
	for _, m := range s.LabelMatchers {
		if m.Name == labels.MetricName {
			continue
		}
		if !have[m.Name] {
			c.fail("label %q is not a label of %s (its labels: %s)", m.Name, strings.Join(names, ", "), list(have))
			continue
		}
		if slices.Contains(TargetLabels, m.Name) {
			continue
		}
		for _, v := range matchedValues(m) {
			if !c.knownValue(names, m.Name, v) {
				c.fail("matches %s=%q of %s, a value weft neither exported nor lists in the metric's HELP", m.Name, v, strings.Join(names, ", "))
			}
		}
	}
}

// literal is a value or an alternative of values, as a label matcher's
// regular expression gives them.
var literal = regexp.MustCompile(`^[A-Za-z0-9_./-]+(\|[A-Za-z0-9_./-]+)*$`)

// matchedValues are the values m names, when it names them: an equality
// or inequality, or a regular expression that is an alternative of plain
// values.
func matchedValues(m *labels.Matcher) []string {
	switch m.Type {
	case labels.MatchEqual, labels.MatchNotEqual:
		if m.Value != "" {
			return []string{m.Value}
		}
	case labels.MatchRegexp, labels.MatchNotRegexp:
		if literal.MatchString(m.Value) {
			return strings.Split(m.Value, "|")
		}
	}
	return nil
}

// knownValue reports whether label of one of names took value in the
// scrape, or whether the metric's HELP text lists it.
func (c *checker) knownValue(names []string, label, value string) bool {
	listed := regexp.MustCompile(`(^|[\s(,])` + regexp.QuoteMeta(value) + `($|[\s),.:;])`)
	for _, n := range names {
		s := c.e[n]
		if s == nil {
			continue
		}
		if s.Labels[label][value] || listed.MatchString(s.Help) {
			return true
		}
	}
	return false
}

// names are the exported metrics s selects: its name, or those its
// __name__ pattern matches (pattern is then that matcher, for messages).
func (c *checker) names(s *parser.VectorSelector) (names []string, pattern string) {
	if s.Name != "" {
		return []string{s.Name}, ""
	}
	for _, m := range s.LabelMatchers {
		if m.Name != labels.MetricName {
			continue
		}
		pattern = m.String()
		for n := range c.e {
			if m.Matches(n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names, pattern
}

// selectorLabels are the labels series of names can carry: their own and
// Prometheus's target labels.
func (c *checker) selectorLabels(names []string) map[string]bool {
	out := map[string]bool{}
	for _, l := range TargetLabels {
		out[l] = true
	}
	for _, n := range names {
		if s := c.e[n]; s != nil {
			for l := range s.Labels {
				out[l] = true
			}
		}
	}
	return out
}

// labelsOf checks that every label of want is a label of some series
// beneath n.
func (c *checker) labelsOf(n parser.Node, want []string, verb string) {
	have, complete := c.beneath(n)
	if !complete {
		return
	}
	for _, l := range want {
		if !have[l] {
			c.fail("%s %q, a label of none of the metrics beneath it (they have: %s)", verb, l, list(have))
		}
	}
}

// beneath is the union of the labels of every selector under n; complete
// is false when one of them selects a metric weft does not export.
func (c *checker) beneath(n parser.Node) (have map[string]bool, complete bool) {
	have, complete = map[string]bool{}, true
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		if s, ok := n.(*parser.VectorSelector); ok {
			names, _ := c.names(s)
			maps.Copy(have, c.selectorLabels(names))
			complete = complete && c.exported(s)
		}
		return nil
	})
	return have, complete
}

// output returns the labels the result of e carries, when it can tell.
func (c *checker) output(e parser.Expr) (map[string]bool, bool) {
	switch e := e.(type) {
	case *parser.VectorSelector:
		names, _ := c.names(e)
		return c.selectorLabels(names), c.exported(e)
	case *parser.MatrixSelector:
		return c.output(e.VectorSelector)
	case *parser.ParenExpr:
		return c.output(e.Expr)
	case *parser.SubqueryExpr:
		return c.output(e.Expr)
	case *parser.UnaryExpr:
		return c.output(e.Expr)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return map[string]bool{}, true
	case *parser.AggregateExpr:
		in, known := c.output(e.Expr)
		if e.Without {
			for _, l := range e.Grouping {
				delete(in, l)
			}
			return in, known
		}
		out := map[string]bool{}
		for _, l := range e.Grouping {
			out[l] = true
		}
		return out, known
	case *parser.Call:
		return c.callOutput(e)
	case *parser.BinaryExpr:
		return c.binaryOutput(e)
	}
	return nil, false
}

// callOutput is output for a function call: the labels of its vector or
// range argument, less le for histogram_quantile; unknown for functions
// that make labels (label_replace, label_join).
func (c *checker) callOutput(e *parser.Call) (map[string]bool, bool) {
	switch e.Func.Name {
	case "label_replace", "label_join":
		return nil, false
	case "vector", "time", "scalar":
		return map[string]bool{}, true
	}
	for _, a := range e.Args {
		t := a.Type()
		if t != parser.ValueTypeVector && t != parser.ValueTypeMatrix {
			continue
		}
		out, known := c.output(a)
		if e.Func.Name == "histogram_quantile" {
			delete(out, "le")
		}
		return out, known
	}
	return map[string]bool{}, true
}

// binaryOutput is output for a binary expression: the union of both sides
// for or; the matching labels for arithmetic on(...); else the left side's
// (or the vector side's, against a scalar).
func (c *checker) binaryOutput(e *parser.BinaryExpr) (map[string]bool, bool) {
	lhs, lknown := c.output(e.LHS)
	if e.LHS.Type() == parser.ValueTypeScalar {
		return c.output(e.RHS)
	}
	if e.RHS.Type() == parser.ValueTypeScalar {
		return lhs, lknown
	}
	switch {
	case e.Op == parser.LOR:
		rhs, rknown := c.output(e.RHS)
		maps.Copy(lhs, rhs)
		return lhs, lknown && rknown
	case e.Op == parser.LAND || e.Op == parser.LUNLESS || e.Op.IsComparisonOperator():
		return lhs, lknown
	case e.VectorMatching != nil && e.VectorMatching.On && e.VectorMatching.Card == parser.CardOneToOne:
		out := map[string]bool{}
		for _, l := range e.VectorMatching.MatchingLabels {
			out[l] = true
		}
		return out, true
	}
	return lhs, lknown
}

// list is a set of labels, sorted, for messages.
func list(set map[string]bool) string {
	return strings.Join(slices.Sorted(maps.Keys(set)), ", ")
}
