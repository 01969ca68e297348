package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/svc"
)

// metrics are weft_puller_*.
type metrics struct {
	pulls     *prometheus.CounterVec   // attempts by mode and outcome phase
	duration  *prometheus.HistogramVec // attempt duration by mode
	active    *prometheus.GaugeVec     // nodes pulling, by mode (this replica's last look)
	queued    *prometheus.GaugeVec     // nodes waiting for an attempt, by mode
	images    *prometheus.GaugeVec     // PrePullImages by phase
	slots     *prometheus.GaugeVec     // slots this replica holds, by scope
	workloads *prometheus.GaugeVec     // workloads each policy selects
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_puller_pulls_total", Help: "Pull attempts of a node's images, by mode and phase (started, Pulled, Failed).",
		}, []string{"mode", "phase"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weft_puller_pull_duration_seconds", Help: "Duration of ended pull attempts of a node's images, by mode.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 12),
		}, []string{"mode"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_puller_active_pulls", Help: "Nodes whose images are being pulled, by mode, as this replica last saw them.",
		}, []string{"mode"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_puller_queued_pulls", Help: "Nodes waiting for their next pull attempt (backoff or a free slot), by mode.",
		}, []string{"mode"}),
		images: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_puller_prepullimages", Help: "PrePullImages by phase, as this replica last saw them.",
		}, []string{"phase"}),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_puller_slots_held", Help: "Concurrency slots this replica holds for pull Jobs, by scope.",
		}, []string{"scope"}),
		workloads: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_puller_watched_workloads", Help: "Workloads each valid PrePullPolicy selects.",
		}, []string{"policy"}),
	}
	return m, svc.Register(reg, Service, m.pulls, m.duration, m.active, m.queued, m.images, m.slots, m.workloads)
}
