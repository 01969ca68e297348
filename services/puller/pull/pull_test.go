package pull_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/pull"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func spec() *v1alpha1.PrePullPolicySpec {
	s := &v1alpha1.PrePullPolicySpec{Retry: v1alpha1.Retry{MaxAttempts: 3}, TTL: &metav1.Duration{Duration: time.Hour}}
	s.Default()
	return s
}

func at(d time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(d)); return &t }

func image(nodes []string, status ...v1alpha1.NodeStatus) *v1alpha1.PrePullImage {
	p := &v1alpha1.PrePullImage{Spec: v1alpha1.PrePullImageSpec{Nodes: nodes}}
	p.Status.Nodes = status
	return p
}

func TestStep(t *testing.T) {
	pulling := func(node string, n int32) v1alpha1.NodeStatus {
		return v1alpha1.NodeStatus{Node: node, Phase: v1alpha1.NodePulling, Attempts: n, StartTime: at(0)}
	}
	tests := []struct {
		name      string
		ppi       *v1alpha1.PrePullImage
		observed  map[string]pull.Attempt
		now       time.Duration
		wantPhase v1alpha1.ImagePhase
		wantNodes map[string]v1alpha1.NodePhase
		wantStart []pull.Start
		wantWake  time.Duration // 0: none
		expired   bool
	}{{
		name: "new nodes start their first attempt", ppi: image([]string{"a", "b"}),
		wantPhase: v1alpha1.ImageInProgress,
		wantNodes: map[string]v1alpha1.NodePhase{"a": v1alpha1.NodePulling, "b": v1alpha1.NodePulling},
		wantStart: []pull.Start{{Node: "a", Attempt: 1}, {Node: "b", Attempt: 1}},
	}, {
		name: "an attempt without an outcome goes on", ppi: image([]string{"a"}, pulling("a", 1)), now: time.Minute,
		wantPhase: v1alpha1.ImageInProgress, wantNodes: map[string]v1alpha1.NodePhase{"a": v1alpha1.NodePulling},
		wantWake: 10*time.Minute + pull.Grace,
	}, {
		name: "pulled everywhere: Completed, deleted after the TTL", ppi: image([]string{"a"}, pulling("a", 1)),
		observed: map[string]pull.Attempt{"a": {Done: true}}, now: time.Minute,
		wantPhase: v1alpha1.ImageCompleted, wantNodes: map[string]v1alpha1.NodePhase{"a": v1alpha1.NodePulled},
		wantWake: time.Minute + time.Hour,
	}, {
		name: "a failed attempt waits for the backoff", ppi: image([]string{"a"}, pulling("a", 2)),
		observed: map[string]pull.Attempt{"a": {Done: true, Failed: true, Message: "not found"}}, now: time.Minute,
		wantPhase: v1alpha1.ImageInProgress, wantNodes: map[string]v1alpha1.NodePhase{"a": v1alpha1.NodePending},
		wantWake: time.Minute + 60*time.Second, // 30s doubled once
	}, {
		name: "the last attempt failed: Failed", ppi: image([]string{"a", "b"}, pulling("a", 3), v1alpha1.NodeStatus{Node: "b", Phase: v1alpha1.NodePulled, Attempts: 1}),
		observed: map[string]pull.Attempt{"a": {Done: true, Failed: true, Message: "not found"}}, now: time.Minute,
		wantPhase: v1alpha1.ImageFailed, wantNodes: map[string]v1alpha1.NodePhase{"a": v1alpha1.NodeFailed, "b": v1alpha1.NodePulled},
	}, {
		name: "the backoff is over: the next attempt starts",
		ppi:  image([]string{"a"}, v1alpha1.NodeStatus{Node: "a", Phase: v1alpha1.NodePending, Attempts: 1, NextAttemptTime: at(time.Minute)}),
		now:  time.Minute, wantPhase: v1alpha1.ImageInProgress,
		wantNodes: map[string]v1alpha1.NodePhase{"a": v1alpha1.NodePulling}, wantStart: []pull.Start{{Node: "a", Attempt: 2}},
	}, {
		name: "no outcome within the timeout: the attempt failed", ppi: image([]string{"a"}, pulling("a", 1)),
		now: 11 * time.Minute, wantPhase: v1alpha1.ImageInProgress, wantNodes: map[string]v1alpha1.NodePhase{"a": v1alpha1.NodePending},
		wantWake: 11*time.Minute + 30*time.Second,
	}, {
		name: "Completed and the TTL over: expired",
		ppi: func() *v1alpha1.PrePullImage {
			p := image([]string{"a"}, v1alpha1.NodeStatus{Node: "a", Phase: v1alpha1.NodePulled, Attempts: 1})
			p.Status.Phase, p.Status.CompletionTime = v1alpha1.ImageCompleted, at(0)
			return p
		}(),
		now: 2 * time.Hour, wantPhase: v1alpha1.ImageCompleted, wantNodes: map[string]v1alpha1.NodePhase{"a": v1alpha1.NodePulled}, expired: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pull.Step(tt.ppi, spec(), tt.observed, t0.Add(tt.now))
			if p.Status.Phase != tt.wantPhase {
				t.Errorf("phase %s, want %s", p.Status.Phase, tt.wantPhase)
			}
			for _, n := range p.Status.Nodes {
				if n.Phase != tt.wantNodes[n.Node] {
					t.Errorf("node %s %s, want %s", n.Node, n.Phase, tt.wantNodes[n.Node])
				}
			}
			if len(p.Status.Nodes) != len(tt.wantNodes) {
				t.Errorf("%d nodes, want %d", len(p.Status.Nodes), len(tt.wantNodes))
			}
			if len(p.Start) != len(tt.wantStart) {
				t.Fatalf("start %v, want %v", p.Start, tt.wantStart)
			}
			for i := range p.Start {
				if p.Start[i] != tt.wantStart[i] {
					t.Errorf("start %v, want %v", p.Start, tt.wantStart)
				}
			}
			var wake time.Duration
			if !p.Wake.IsZero() {
				wake = p.Wake.Sub(t0)
			}
			if wake != tt.wantWake {
				t.Errorf("wake at +%v, want +%v", wake, tt.wantWake)
			}
			if p.Expired != tt.expired {
				t.Errorf("expired %v, want %v", p.Expired, tt.expired)
			}
		})
	}
}

func TestFailedMessageKept(t *testing.T) {
	ppi := image([]string{"a"}, v1alpha1.NodeStatus{Node: "a", Phase: v1alpha1.NodePulling, Attempts: 3, StartTime: at(0)})
	p := pull.Step(ppi, spec(), map[string]pull.Attempt{"a": {Done: true, Failed: true, Message: "x: not found"}}, t0)
	if n := p.Status.Nodes[0]; n.Message != "x: not found" || n.CompletionTime == nil {
		t.Errorf("node %+v, want the attempt's message and a completion time", n)
	}
	if len(p.Ended) != 1 || !p.Ended[0].Failed || p.Ended[0].Attempt != 3 {
		t.Errorf("ended %+v", p.Ended)
	}
}

// TestStartClearsTheMessage: a node whose attempt starts no longer says
// what it waited for, or why its last attempt failed; that attempt's
// outcome will say.
func TestStartClearsTheMessage(t *testing.T) {
	for _, message := range []string{"waiting for a free slot: all 4 of cluster are held", "x: not found"} {
		ppi := image([]string{"a"}, v1alpha1.NodeStatus{Node: "a", Phase: v1alpha1.NodePending, Attempts: 1, Message: message})
		p := pull.Step(ppi, spec(), nil, t0)
		if n := p.Status.Nodes[0]; n.Phase != v1alpha1.NodePulling || n.Attempts != 2 || n.Message != "" {
			t.Errorf("node %+v, want Pulling its second attempt with no message", n)
		}
	}
}

func TestBackoff(t *testing.T) {
	r := v1alpha1.Retry{Backoff: &metav1.Duration{Duration: 30 * time.Second}, MaxBackoff: &metav1.Duration{Duration: 100 * time.Second}}
	for n, want := range map[int32]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 100 * time.Second, 10: 100 * time.Second} {
		if got := pull.Backoff(r, n); got != want {
			t.Errorf("Backoff after attempt %d: %v, want %v", n, got, want)
		}
	}
}

func TestFromPullStatus(t *testing.T) {
	var st msg.PullStatus
	st.Set(msg.ImagePull{Image: "a", Phase: msg.PullPulled, Attempts: 2})
	st.Set(msg.ImagePull{Image: "b", Phase: msg.PullPulling, Attempts: 2})
	images := []string{"a", "b"}
	if a := pull.FromPullStatus(&st, images, 2); a.Done {
		t.Errorf("one image still pulling: %+v", a)
	}
	st.Set(msg.ImagePull{Image: "b", Phase: msg.PullFailed, Attempts: 2, Message: "denied"})
	if a := pull.FromPullStatus(&st, images, 2); !a.Done || !a.Failed || a.Message != "b: denied" {
		t.Errorf("one image failed: %+v", a)
	}
	if a := pull.FromPullStatus(&st, images, 3); a.Done {
		t.Errorf("the status of attempt 2 taken for attempt 3: %+v", a)
	}
	st.Set(msg.ImagePull{Image: "b", Phase: msg.PullPulled, Attempts: 2})
	if a := pull.FromPullStatus(&st, images, 2); !a.Done || a.Failed {
		t.Errorf("both pulled: %+v", a)
	}
}
