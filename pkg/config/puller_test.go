package config_test

import (
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// The puller section adds the watched types its controller reads, with
// the pull Jobs' label selector, and fills its defaults.
func TestPullerAddsItsTypes(t *testing.T) {
	c, err := config.Parse([]byte(`
sources:
  - {name: cluster, type: kubernetes}
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress}
puller:
  source: cluster
  helper_image: ghcr.io/weftio/weft:v1
targets:
  edge:
    deploy: {driver: files, dest: out}
    haproxy_config: {template: "global\n"}
`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := "ingresses,puller_daemonsets,puller_deployments,puller_images,puller_jobs,puller_namespaces,puller_nodes,puller_policies,puller_statefulsets"
	if got := strings.Join(c.ResourceTypes(), ","); got != want {
		t.Errorf("types %s, want %s", got, want)
	}
	if jobs := c.WatchedResources[config.PullerJobs]; jobs.Kind != "Job" || jobs.LabelSelector != config.PullerJobSelector {
		t.Errorf("pull Jobs type %+v", jobs)
	}
	if typ, ok := c.TypeFor("weft.io/v1alpha1", "PrePullImage"); !ok || typ != config.PullerImages {
		t.Errorf("TypeFor PrePullImage = %q %v", typ, ok)
	}
	p := c.Puller
	if p.HelperBinary != config.DefaultPullerHelperBinary || p.AgentNamespace != config.DefaultPullerAgentNamespace || p.Resync.D() != config.DefaultPullerResync {
		t.Errorf("defaults %+v", p)
	}
}

// Without the section nothing is added.
func TestNoPuller(t *testing.T) {
	c, err := config.Load("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Puller != nil || len(c.WatchedResources) != 2 {
		t.Errorf("puller %+v, types %v", c.Puller, c.ResourceTypes())
	}
}
