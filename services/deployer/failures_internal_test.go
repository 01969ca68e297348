package deployer

import (
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	defer func(f, m time.Duration) { retryFirst, retryMax = f, m }(retryFirst, retryMax)
	retryFirst, retryMax = time.Second, time.Minute
	tests := []struct {
		attempt uint64
		want    time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {6, 32 * time.Second},
		{7, time.Minute}, {8, time.Minute}, {1 << 40, time.Minute},
	}
	for _, tt := range tests {
		if got := retryDelay(tt.attempt); got != tt.want {
			t.Errorf("retryDelay(%d) = %v, want %v", tt.attempt, got, tt.want)
		}
	}
}
