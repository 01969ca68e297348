package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/svc"
)

// metrics are the agent's own, beside bus's weft_puller_agent_messages_total.
type metrics struct {
	pulls    *prometheus.CounterVec   // weft_puller_agent_pulls_total{outcome}
	duration *prometheus.HistogramVec // weft_puller_agent_pull_duration_seconds{outcome}
	bytes    prometheus.Counter       // weft_puller_agent_pulled_bytes_total
	active   prometheus.Gauge         // weft_puller_agent_pulls_in_progress
	retries  prometheus.Counter       // weft_puller_agent_retries_total
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_puller_agent_pulls_total",
			Help: "Pull orders carried out, by outcome (pulled, present, failed).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weft_puller_agent_pull_duration_seconds",
			Help:    "Time from taking a pull order to its outcome, by outcome.",
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
	}
	if err := svc.Register(reg, Service, m.pulls, m.duration, m.bytes, m.active, m.retries); err != nil {
		return nil, err
	}
	return m, nil
}
