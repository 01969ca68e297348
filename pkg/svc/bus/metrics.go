package bus

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the per-service message metrics:
// weft_<service>_messages_total{stage,outcome},
// weft_<service>_handle_duration_seconds{stage} and
// weft_<service>_dead_letters_total{stage}.
type Metrics struct {
	messages    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	deadLetters *prometheus.CounterVec
}

// NewMetrics registers the message metrics of service with reg.
func NewMetrics(service string, reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_" + service + "_messages_total",
			Help: "Messages handled, by stage and outcome (ack, nak, term).",
		}, []string{"stage", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weft_" + service + "_handle_duration_seconds",
			Help:    "Time to handle one message, by stage.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"stage"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_" + service + "_dead_letters_total",
			Help: "Messages dead-lettered, by stage.",
		}, []string{"stage"}),
	}
	var err error
	if m.messages, err = register(reg, m.messages); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.deadLetters, err = register(reg, m.deadLetters); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c with reg, or returns the collector of the same
// description registered before (by another handler of the service), so
// that every handler counts into the one reg serves.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
