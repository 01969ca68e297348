package job_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// serviceAccounts is a fixed set of ServiceAccounts by namespace/name.
type serviceAccounts map[string]*corev1.ServiceAccount

func (s serviceAccounts) ServiceAccount(_ context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	if sa, ok := s[namespace+"/"+name]; ok {
		return sa, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccounts"}, name)
}

func secrets(names ...string) []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	for _, n := range names {
		out = append(out, corev1.LocalObjectReference{Name: n})
	}
	return out
}

func owner(name string, images ...v1alpha1.ContainerImage) *v1alpha1.PrePullImage {
	return &v1alpha1.PrePullImage{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("7d1c2f4e-0b7a-4f55-9a47-5f3d1e2c9b80")},
		Spec:       v1alpha1.PrePullImageSpec{Policy: "all", Images: images},
	}
}

var sas = serviceAccounts{
	"shop/web":     {ImagePullSecrets: secrets("sa-creds", "shared-creds")},
	"shop/default": {},
}

func builder() *job.Builder {
	return &job.Builder{HelperImage: "ghcr.io/weftio/weft:v0.1.0", ServiceAccounts: sas}
}

// TestBuild compares the Jobs built for a few inputs with
// testdata/*.golden.yaml (go test -run TestBuild -update rewrites them).
func TestBuild(t *testing.T) {
	timeout := &metav1.Duration{Duration: 90 * time.Second}
	for _, tc := range []struct {
		name string
		in   job.Input
	}{
		{"tainted-node-with-secrets", job.Input{
			Owner: owner("web",
				v1alpha1.ContainerImage{Container: "migrate", Image: "registry.example.com/web/migrate:1.2", Init: true},
				v1alpha1.ContainerImage{Container: "web", Image: "registry.example.com/web:1.2"},
				v1alpha1.ContainerImage{Container: "sidecar", Image: "registry.example.com/web:1.2"},
			),
			Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
				{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule},
				{Key: "dedicated", Effect: corev1.TaintEffectNoExecute},
			}}},
			Workload: &corev1.PodSpec{ServiceAccountName: "web", ImagePullSecrets: secrets("web-creds", "shared-creds")},
			Attempt:  2,
			Settings: v1alpha1.JobSettings{Timeout: timeout, Resources: &v1alpha1.Resources{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
			}},
		}},
		{"plain-node-defaults", job.Input{
			Owner:    owner("a-prepullimage-whose-name-is-much-longer-than-forty-characters", v1alpha1.ContainerImage{Container: "app", Image: "gcr.io/distroless/static:nonroot"}),
			Node:     &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ip-10-0-12-34.eu-west-1.compute.internal.example-long-cluster-name.example.com"}},
			Workload: &corev1.PodSpec{},
			Attempt:  1,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := builder().Build(context.Background(), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(j.Name); n > 63 {
				t.Errorf("name %q is %d characters", j.Name, n)
			}
			got, err := yaml.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("Job differs from %s:\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

// TestBuildRefuses: a missing ServiceAccount is an error, not "no
// secrets", and incomplete input is ErrInvalidInput naming what is missing.
func TestBuildRefuses(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	img := v1alpha1.ContainerImage{Container: "web", Image: "nginx"}
	_, err := builder().Build(context.Background(), job.Input{
		Owner: owner("web", img), Node: node, Attempt: 1, Workload: &corev1.PodSpec{ServiceAccountName: "gone"},
	})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "ServiceAccount shop/gone") {
		t.Errorf("missing ServiceAccount: %v", err)
	}
	for _, tc := range []struct {
		name string
		b    *job.Builder
		in   job.Input
		want string
	}{
		{"no helper image", &job.Builder{ServiceAccounts: sas}, job.Input{Owner: owner("web", img), Node: node, Workload: &corev1.PodSpec{}, Attempt: 1}, "no helper image"},
		{"no images", builder(), job.Input{Owner: owner("web"), Node: node, Workload: &corev1.PodSpec{}, Attempt: 1}, "no images"},
		{"no node", builder(), job.Input{Owner: owner("web", img), Workload: &corev1.PodSpec{}, Attempt: 1}, "no node"},
		{"attempt 0", builder(), job.Input{Owner: owner("web", img), Node: node, Workload: &corev1.PodSpec{}}, "attempt 0"},
	} {
		_, err := tc.b.Build(context.Background(), tc.in)
		if !errors.Is(err, job.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// TestName: stable, distinct per node and attempt, at most 63 characters.
func TestName(t *testing.T) {
	o := owner(strings.Repeat("x", 253))
	a, b, c := job.Name(o, "n1", 1), job.Name(o, "n1", 2), job.Name(o, "n2", 1)
	if a != job.Name(o, "n1", 1) || a == b || a == c || b == c {
		t.Errorf("names %s %s %s", a, b, c)
	}
	for _, n := range []string{a, b, c} {
		if len(n) > 63 {
			t.Errorf("%s: %d characters", n, len(n))
		}
	}
}
