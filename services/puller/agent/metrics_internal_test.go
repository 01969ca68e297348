package agent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/msg"
)

// TestMetricsStartAtZero: the series alerts and dashboards follow exist
// from the agent's start, at 0, before anything was pulled.
func TestMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg, func() float64 { return 0 }); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount()); v != 0 {
				t.Errorf("%s = %v at start", f.GetName(), v)
			}
			for _, l := range m.GetLabel() {
				got[f.GetName()+"{"+l.GetName()+"="+l.GetValue()+"}"] = true
			}
		}
	}
	for _, want := range []string{
		"weft_puller_agent_pulls_total{outcome=" + msg.PullOutcomePulled + "}",
		"weft_puller_agent_pulls_total{outcome=" + msg.PullOutcomePresent + "}",
		"weft_puller_agent_pulls_total{outcome=" + msg.PullOutcomeFailed + "}",
		"weft_puller_agent_pull_duration_seconds{outcome=" + msg.PullOutcomeFailed + "}",
		"weft_puller_agent_limit_full_total{scope=" + msg.ClusterSlotScope + "}",
		"weft_puller_agent_slots_held{scope=" + msg.ClusterSlotScope + "}",
	} {
		if !got[want] {
			t.Errorf("%s is not exported at start", want)
		}
	}
}
