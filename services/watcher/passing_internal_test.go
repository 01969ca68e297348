package watcher

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/services/watcher/store"
)

// TestPassingProblems: bucket writes that asking again fixes are warnings;
// a source that cannot be read or parsed is an error.
func TestPassingProblems(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("store: write k: %w", store.ErrContended), true},
		{fmt.Errorf("store manifests endpoints: store: write k: %w", jetstream.ErrNoStreamResponse), true},
		{fmt.Errorf("store: write k: %w", nats.ErrTimeout), true},
		{fmt.Errorf("store: write k: %w", nats.ErrNoResponders), true},
		{errors.New("not loaded; the last good objects of a.yaml stay: yaml: line 3: did not find expected key"), false},
		{errors.New("list pods: the server is currently unable to handle the request"), false},
	}
	for _, tt := range tests {
		if got := passing(tt.err); got != tt.want {
			t.Errorf("passing(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
