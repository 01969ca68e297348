package host

import (
	"flag"
	"testing"
)

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

// TestProvisionFlag: provisioning is on unless --provision=false or
// WEFT_PROVISION=false says otherwise, and a Settings literal provisions.
func TestProvisionFlag(t *testing.T) {
	tests := []struct {
		env  string
		args []string
		skip bool
	}{
		{"", nil, false},
		{"", []string{"--provision=false"}, true},
		{"", []string{"--provision"}, false},
		{"false", nil, true},
		{"false", []string{"--provision=true"}, false},
	}
	for _, tt := range tests {
		t.Setenv("WEFT_PROVISION", tt.env)
		var s Settings
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		s.Flags(fs, false)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if s.SkipProvision != tt.skip {
			t.Errorf("WEFT_PROVISION=%q %v: SkipProvision = %v, want %v", tt.env, tt.args, s.SkipProvision, tt.skip)
		}
	}
	if (Settings{}).SkipProvision {
		t.Error("a Settings literal skips provisioning")
	}
}
