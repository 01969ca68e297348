package dataplane

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const cfgHead = "global\n    maxconn 100\n\ndefaults\n    mode http\n    timeout client 5s\n\n"

func TestDiffConfig(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		// want are the changes as "backend/server old->new", or the start
		// of the structure detail after "structure: ".
		want string
	}{
		{"same", "backend b\n    server s 10.0.0.1:80\n", "backend b\n    server s 10.0.0.1:80\n", ""},
		{"comments and blank lines", "# _version=4\nbackend b\n    server s 10.0.0.1:80\n",
			"backend b\n\n    # a comment\n    server s 10.0.0.1:80\n", ""},
		{"address", "backend b\n    server s 10.0.0.1:80 check\n", "backend b\n    server s 10.0.0.2:81 check\n",
			"b/s 10.0.0.1:80 w1 ready->10.0.0.2:81 w1 ready"},
		{"ipv6", "backend b\n    server s [::1]:80\n", "backend b\n    server s [2001:db8::1]:80\n",
			"b/s [::1]:80 w1 ready->[2001:db8::1]:80 w1 ready"},
		{"weight and state in a listen section", "listen l\n    bind :80\n    server s 10.0.0.1:80 weight 3\n",
			"listen l\n    bind :80\n    server s 10.0.0.1:80 disabled weight 7\n", "l/s 10.0.0.1:80 w3 ready->10.0.0.1:80 w7 maint"},
		{"other setting", "backend b\n    server s 10.0.0.1:80\n", "backend b\n    server s 10.0.0.1:80 check\n", "structure: "},
		{"name address", "backend b\n    server s 10.0.0.1:80\n", "backend b\n    server s app:80\n", "structure: backend b: server s: address"},
		{"new server", "backend b\n    server s 10.0.0.1:80\n", "backend b\n    server s 10.0.0.1:80\n    server t 10.0.0.2:80\n", "structure: "},
		{"new backend", "backend b\n    server s 10.0.0.1:80\n", "backend b\n    server s 10.0.0.1:80\n\nbackend c\n", "structure: "},
		{"default-server sets weights", "backend b\n    default-server weight 5\n    server s 10.0.0.1:80\n",
			"backend b\n    default-server weight 5\n    server s 10.0.0.1:80 weight 2\n", "structure: backend b: server s: weight or state"},
		{"default-server sets weights, both given", "backend b\n    default-server weight 5\n    server s 10.0.0.1:80 weight 1\n",
			"backend b\n    default-server weight 5\n    server s 10.0.0.1:80 weight 2\n", "b/s 10.0.0.1:80 w1 ready->10.0.0.1:80 w2 ready"},
		{"weight too high", "backend b\n    server s 10.0.0.1:80\n", "backend b\n    server s 10.0.0.1:80 weight 300\n", "structure: backend b: server s: weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes, err := diffConfig([]byte(cfgHead+tt.old), []byte(cfgHead+tt.new))
			var se *structureError
			if errors.As(err, &se) {
				if !strings.HasPrefix(tt.want, "structure: ") || !strings.HasPrefix(se.detail, strings.TrimPrefix(tt.want, "structure: ")) {
					t.Fatalf("structure %q, want %q", se.detail, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, fmt.Sprintf("%s/%s %s->%s", c.backend, c.name, c.old, c.new))
			}
			if strings.Join(got, "; ") != tt.want {
				t.Fatalf("changes %q, want %q", got, tt.want)
			}
		})
	}
}

func (s serverState) String() string {
	state := "ready"
	if s.maint {
		state = "maint"
	}
	return fmt.Sprintf("%s w%d %s", s.addr, s.effectiveWeight(), state)
}
