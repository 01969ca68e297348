// Package monitoring holds weft's Grafana dashboard (weft-dashboard.json)
// and Prometheus alert rules (weft-alerts.yaml, unit-tested by promtool in
// weft-alerts.test.yaml), and checks their queries against the metrics weft
// exports.
//
// DashboardQueries and RuleQueries read every PromQL expression out of the
// dashboard (panel targets, template variables) and the rules, each named by
// where it is (panel or alert) with the labels its legend or annotations
// print. ParseExposition reads what a /metrics endpoint serves into
// Exported, and Check reports every selector of a query that names a
// metric, a label of a metric, or a label value that Exported does not have
// (a value the metric's HELP lists counts: a scrape shows only values that
// happened), naming the query's place, the metric and the label.
//
// The module's tests run weft (weft up with its embedded NATS and a real
// HAProxy, and the puller's node agent), scrape their /metrics after a
// change went through, Check every query, then have a real Prometheus
// scrape them and evaluate every query and rule.
//
// The module is separate so that Prometheus's PromQL parser stays out of
// weft's services.
package monitoring
