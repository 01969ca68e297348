package monitoring_test

import (
	"bytes"
	"flag"
	"os"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "write prometheusrule.yaml from weft-alerts.yaml")

const prometheusRuleFile = "prometheusrule.yaml"

// prometheusRuleHeader is what prometheusrule.yaml holds above the rules.
const prometheusRuleHeader = `# The alert rules of weft-alerts.yaml as a Prometheus Operator
# PrometheusRule, for kustomize (kustomization.yaml). Generated: edit
# weft-alerts.yaml, then
#   go test ./deploy/monitoring -run TestPrometheusRule -update
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: weft
  namespace: weft-system
  labels:
    app.kubernetes.io/part-of: weft
spec:
`

// TestPrometheusRule: prometheusrule.yaml holds weft-alerts.yaml's groups,
// as they are (kustomize cannot wrap a file into an object's spec, so the
// copy is generated and kept equal here).
func TestPrometheusRule(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var groups yaml.Node
	if err := yaml.Unmarshal(rules, &groups); err != nil {
		t.Fatal(err)
	}
	// The rules file's own comment, not the object's.
	groups.HeadComment, groups.Content[0].HeadComment, groups.Content[0].Content[0].HeadComment = "", "", ""
	var b bytes.Buffer
	b.WriteString(prometheusRuleHeader)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]any{"spec": groups.Content[0]}); err != nil {
		t.Fatal(err)
	}
	// The encoder wrote "spec:" again: keep what is under it.
	want := prometheusRuleHeader + string(bytes.TrimPrefix(b.Bytes()[len(prometheusRuleHeader):], []byte("spec:\n")))
	if *update {
		if err := os.WriteFile(prometheusRuleFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not %s's rules: run go test ./deploy/monitoring -run TestPrometheusRule -update", prometheusRuleFile, rulesFile)
	}
	// And the same rules, read back.
	var rule struct {
		Spec any `yaml:"spec"`
	}
	var plain any
	if err := yaml.Unmarshal(got, &rule); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(rules, &plain); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rule.Spec, plain) {
		t.Errorf("%s's spec differs from %s", prometheusRuleFile, rulesFile)
	}
}
