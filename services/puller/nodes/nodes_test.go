package nodes_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/services/puller/nodes"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// testCase is one file of testdata/: a pod template, the nodes, and how
// the workload is selected.
type testCase struct {
	Pod            corev1.PodSpec        `json:"pod"`
	Nodes          []corev1.Node         `json:"nodes"`
	DaemonSet      bool                  `json:"daemonSet"`
	PolicySelector *metav1.LabelSelector `json:"policySelector"`
}

// TestFilter runs each case of testdata/*.yaml and compares the verdicts
// with testdata/*.golden (go test -run TestFilter -update rewrites them).
func TestFilter(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var tc testCase
			if err := yaml.UnmarshalStrict(data, &tc); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			var opts []nodes.Option
			if tc.DaemonSet {
				opts = append(opts, nodes.AsDaemonSet())
			}
			if tc.PolicySelector != nil {
				sel, err := metav1.LabelSelectorAsSelector(tc.PolicySelector)
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, nodes.WithSelector(sel))
			}
			verdicts, err := nodes.Filter(&tc.Pod, tc.Nodes, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, v := range verdicts {
				b.WriteString(v.String() + "\n")
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if b.String() != string(want) {
				t.Errorf("verdicts differ from %s:\n--- got\n%s--- want\n%s", golden, b.String(), want)
			}
			eligible, err := nodes.Eligible(&tc.Pod, tc.Nodes, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var fromVerdicts []string
			for _, v := range verdicts {
				if v.Eligible {
					fromVerdicts = append(fromVerdicts, v.Node)
				}
			}
			if strings.Join(eligible, ",") != strings.Join(fromVerdicts, ",") {
				t.Errorf("Eligible %v, verdicts %v", eligible, fromVerdicts)
			}
		})
	}
}

// TestFilterInvalidAffinity: an affinity the scheduler cannot parse is an
// error naming the field, not "no node" and not "every node".
func TestFilterInvalidAffinity(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  corev1.NodeSelectorRequirement
		want string
	}{
		{"operator", corev1.NodeSelectorRequirement{Key: "pool", Operator: "Equals", Values: []string{"web"}}, `operator: Unsupported value: "Equals"`},
		{"Gt without one integer", corev1.NodeSelectorRequirement{Key: "cores", Operator: corev1.NodeSelectorOpGt, Values: []string{"many"}}, "many"},
		{"field with two values", corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}, "matchFields[0].values: Invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{tc.req}}
			if strings.HasPrefix(tc.req.Key, "metadata.") {
				term = corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{tc.req}}
			}
			spec := &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}},
			}}}
			node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"pool": "web"}}}
			_, err := nodes.Filter(spec, []corev1.Node{node})
			if !errors.Is(err, nodes.ErrInvalidAffinity) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrInvalidAffinity naming %q", err, tc.want)
			}
		})
	}
}
