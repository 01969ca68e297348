package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// agentStatus returns the pull status of each Pulling node that has one,
// the same whether it reads a key per node (a few nodes) or every key of
// the PrePullImage at once (many): not another PrePullImage's, nor a
// deleted one.
func TestAgentStatus(t *testing.T) {
	bus := testkit.NATS(t)
	ctx := context.Background()
	pulls, err := bus.JS.KeyValue(ctx, msg.BucketPulls)
	if err != nil {
		t.Fatal(err)
	}
	c := &controller{pulls: pulls}
	put := func(name, node string) []byte {
		t.Helper()
		st := msg.PullStatus{Namespace: "shop", Name: name, UID: name + "-uid", Node: node, Phase: msg.PullPulling, At: time.Now().UTC()}
		data, err := msg.Encode(st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pulls.Put(ctx, msg.PullStatusKey("shop", name, node), data); err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, nodes := range []int{readAllFrom - 1, readAllFrom + 4} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) {
			name := fmt.Sprintf("web-%d", nodes)
			ppi := &v1alpha1.PrePullImage{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
			want := map[string][]byte{}
			for i := range nodes {
				node := fmt.Sprintf("worker-%02d.example.com", i)
				ppi.Status.Nodes = append(ppi.Status.Nodes, v1alpha1.NodeStatus{Node: node, Phase: v1alpha1.NodePulling, Attempts: 1})
				put(name+"-other", node) // another PrePullImage's
				switch i % 3 {
				case 0: // no status yet
				case 1:
					want[node] = put(name, node)
				case 2: // deleted
					put(name, node)
					if err := pulls.Delete(ctx, msg.PullStatusKey("shop", name, node)); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := c.agentStatus(ctx, ppi)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Errorf("status of nodes %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
		})
	}
}
