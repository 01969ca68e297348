package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
)

// metrics are the agent's own, beside bus's weft_puller_agent_messages_total.
type metrics struct {
	pulls     *prometheus.CounterVec   // weft_puller_agent_pulls_total{outcome}
	duration  *prometheus.HistogramVec // weft_puller_agent_pull_duration_seconds{outcome}
	bytes     prometheus.Counter       // weft_puller_agent_pulled_bytes_total
	active    prometheus.Gauge         // weft_puller_agent_pulls_in_progress
	retries   prometheus.Counter       // weft_puller_agent_retries_total
	slotsHeld *prometheus.GaugeVec     // weft_puller_agent_slots_held{scope}
	full      *prometheus.CounterVec   // weft_puller_agent_limit_full_total{scope}
}

func newMetrics(reg prometheus.Registerer, queued func() float64) (*metrics, error) {
	m := &metrics{
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_puller_agent_pulls_total",
			Help: "Pull orders carried out, by outcome (pulled, present, failed).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weft_puller_agent_pull_duration_seconds",
			Help:    "Time from the start of a pull (its slots held) to its outcome, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"outcome"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_puller_agent_pulled_bytes_total",
			Help: "Size of the images pulled, as the runtime reports them.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_puller_agent_pulls_in_progress",
			Help: "Pulls running now.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_puller_agent_retries_total",
			Help: "Pull attempts that failed in a way worth retrying (runtime or registry unreachable, rate limited, status not written).",
		}),
		slotsHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_puller_agent_slots_held",
			Help: "Pull slots this agent holds now, by limit scope (cluster, node/<node>, registry/<host>); summed over agents, the slots in use.",
		}, []string{"scope"}),
		full: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_puller_agent_limit_full_total",
			Help: "Times an order found every slot of a limit held and went back to wait in its queue, by the limit's scope.",
		}, []string{"scope"}),
	}
	// Every outcome, and the cluster's limit (every order's limits may
	// name it), is exported from the start at 0 (dashboards show them
	// before the first pull): an alert on the increase
	// of failed pulls then fires on an agent's first failure too, which a
	// series that appears already at 1 would not show.
	for _, o := range []string{msg.PullOutcomePulled, msg.PullOutcomePresent, msg.PullOutcomeFailed} {
		m.pulls.WithLabelValues(o)
		m.duration.WithLabelValues(o)
	}
	m.full.WithLabelValues(msg.ClusterSlotScope)
	m.slotsHeld.WithLabelValues(msg.ClusterSlotScope)
	queuedPulls := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "weft_puller_agent_queued_pulls",
		Help: "Pull orders of this node waiting in their queue for a pull slot (a limit is full).",
	}, queued)
	if err := svc.Register(reg, Service, m.pulls, m.duration, m.bytes, m.active, m.retries, m.slotsHeld, m.full, queuedPulls); err != nil {
		return nil, err
	}
	return m, nil
}

// observeSlot is the slots' observer: +1 for a slot taken, -1 for one freed
// or lost.
func (m *metrics) observeSlot(scope string, delta int) {
	m.slotsHeld.WithLabelValues(scope).Add(float64(delta))
}
