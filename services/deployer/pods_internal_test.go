package deployer

import (
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// TestPodInstanceName: Pods whose namespace and name join alike with a
// dash, or differ only by dots, still get instance names of their own,
// each a subject token.
func TestPodInstanceName(t *testing.T) {
	pods := [][2]string{
		{"team-a", "web"}, {"team", "a-web"},
		{"lb", "haproxy.0"}, {"lb", "haproxy-0"}, {"lb-haproxy", "0"},
		{"a", "b.c"}, {"a-b", "c"}, {"a", "b-c"},
	}
	seen := map[string][2]string{}
	for _, p := range pods {
		name := podInstanceName(p[0], p[1])
		if err := msg.ValidToken(name); err != nil {
			t.Errorf("%s/%s: %v", p[0], p[1], err)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("%s/%s and %s/%s are both %s", p[0], p[1], other[0], other[1], name)
		}
		seen[name] = p
	}
	if got := podInstanceName("lb", "haproxy-0.x"); got != "pod-lb_haproxy-0_x" {
		t.Errorf("lb/haproxy-0.x is %s", got)
	}
}
