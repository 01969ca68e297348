package bus

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestNewMetricsTwiceCountsIntoOne: a second NewMetrics of the same service
// on the same registry counts into the collectors registered first, which
// are the ones the registry serves.
func TestNewMetricsTwiceCountsIntoOne(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewMetrics("s", reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMetrics("s", reg)
	if err != nil {
		t.Fatal(err)
	}
	a.messages.WithLabelValues("x", "ack").Inc()
	b.messages.WithLabelValues("x", "ack").Inc()
	b.deadLetters.WithLabelValues("x").Inc()
	if got := testutil.ToFloat64(a.messages.WithLabelValues("x", "ack")); got != 2 {
		t.Errorf("messages = %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "weft_s_messages_total", "weft_s_dead_letters_total"); err != nil || n != 2 {
		t.Errorf("gathered %d series (%v), want 2", n, err)
	}
}
