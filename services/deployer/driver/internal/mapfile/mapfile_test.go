package mapfile

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got := Parse([]byte("# comment\n  a.example   be a  \r\n\n\tb\tv\tw\n #notcomment x\nkeyonly\n"))
	want := []Entry{{"a.example", "be a  "}, {"b", "v\tw"}, {"#notcomment", "x"}, {"keyonly", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %q, want %q", got, want)
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name, old, new string
		orderMatters   bool
		want           string
	}{
		{"patch", "a 1\nb 2\n", "a 9\nc 3\n", false, "adds [{c 3}] sets [{a 9}] dels [b]"},
		{"reorder when order does not matter", "a 1\nb 2\n", "b 2\na 1\n", false, "adds [] sets [] dels []"},
		{"reorder when order matters", "a 1\nb 2\n", "b 2\na 1\n", true, "order"},
		{"append when order matters", "a 1\n", "a 1\nb 2\n", true, "adds [{b 2}] sets [] dels []"},
		{"insert when order matters", "a 1\nc 3\n", "a 1\nb 2\nc 3\n", true, "order"},
		{"duplicates", "a 1\n", "a 1\na 2\n", false, "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, why := Diff(Parse([]byte(tt.old)), Parse([]byte(tt.new)), tt.orderMatters)
			got := why
			if why == "" {
				got = fmt.Sprintf("adds %v sets %v dels %v", orNone(p.Adds), orNone(p.Sets), p.Dels)
				if p.Dels == nil {
					got = strings.TrimSuffix(got, "[]") + "[]"
				}
			}
			if !strings.Contains(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func orNone(e []Entry) []Entry {
	if e == nil {
		return []Entry{}
	}
	return e
}

func TestOrderMatters(t *testing.T) {
	tests := []struct {
		name, cfg, file string
		want            bool
	}{
		{"exact match", "use_backend %[req.hdr(host),map(/etc/haproxy/maps/host.map,be)]", "host.map", false},
		{"prefix match", "use_backend %[path,map_beg(/etc/haproxy/maps/host.map)]", "host.map", false},
		{"regex match", "use_backend %[path,map_reg(/etc/haproxy/maps/host.map,be)]", "host.map", true},
		{"both", "a %[x,map(/m/host.map)] b %[y,map_sub(/m/host.map)]", "host.map", true},
		{"set-map only", "http-request set-map(/m/host.map) a b", "host.map", true},
		{"other file with the name as suffix", "x %[y,map_reg(/m/otherhost.map)] z %[y,map(/m/host.map)]", "host.map", false},
		{"not named", "frontend f", "host.map", true},
		{"lower, then map", "use_backend %[req.hdr(host),lower,map(/etc/haproxy/maps/m.map,be_default)]", "/etc/haproxy/maps/m.map", false},
		{"blanks around the path", "use_backend %[req.hdr(host),map_str( /etc/haproxy/maps/m.map )]", "/etc/haproxy/maps/m.map", false},
		{"map_ip_int", "http-request set-var(txn.x) src,map_ip_int(/etc/haproxy/maps/m.map,0)", "/etc/haproxy/maps/m.map", false},
		{"map_beg", "use_backend %[path,map_beg(/etc/haproxy/maps/m.map)]", "/etc/haproxy/maps/m.map", false},
		{"map_sub", "use_backend %[path,map_sub(/etc/haproxy/maps/m.map)]", "/etc/haproxy/maps/m.map", true},
		{"map_end_int", "use_backend %[path,map_end_int(/etc/haproxy/maps/m.map)]", "/etc/haproxy/maps/m.map", true},
		{"map_reg", "use_backend %[path,map_reg(/etc/haproxy/maps/m.map)]", "/etc/haproxy/maps/m.map", true},
		{"map then map_dir", "use_backend %[req.hdr(host),map(/etc/haproxy/maps/m.map)]\nuse_backend %[path,map_dir(/etc/haproxy/maps/m.map)]", "/etc/haproxy/maps/m.map", true},
		{"set-map and map_ip", "http-request set-map(/etc/haproxy/maps/m.map) %[src] %[path]\nuse_backend %[src,map_ip(/etc/haproxy/maps/m.map)]", "/etc/haproxy/maps/m.map", false},
		{"acl file", "acl x req.hdr(host) -M -f /etc/haproxy/maps/m.map", "/etc/haproxy/maps/m.map", true},
		{"longer name", "use_backend %[req.hdr(host),map(/etc/haproxy/maps/m.map.old)]", "/etc/haproxy/maps/m.map", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OrderMatters([]byte(tt.cfg), tt.file); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
