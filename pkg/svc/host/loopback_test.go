package host

import "testing"

func TestLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:4222", true},
		{"localhost:4222", true},
		{"[::1]:4222", true},
		{"0.0.0.0:4222", false},
		{":4222", false},
		{"10.0.0.1:4222", false},
		{"nonsense", false},
	}
	for _, tt := range tests {
		if got := loopback(tt.addr); got != tt.want {
			t.Errorf("loopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
