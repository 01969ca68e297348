package runtime

import (
	"errors"
	"github.com/weftio/weft/services/deployer/driver/internal/mapfile"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSplitWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"  server s1 1.2.3.4:80 check # comment", []string{"server", "s1", "1.2.3.4:80", "check"}},
		{"\tbind\t:80", []string{"bind", ":80"}},
		{`http-request set-header X "a # b"`, []string{"http-request", "set-header", "X", `"a # b"`}},
		{`acl x path -m str a\ b#c`, []string{"acl", "x", "path", "-m", "str", `a\ b`}},
		{`log-format 'it''s'`, []string{"log-format", `'it''s'`}},
		{"# only a comment", nil},
		{"", nil},
		{"option httplog\r", []string{"option", "httplog"}},
	} {
		if got := splitWords(tc.line); !slices.Equal(got, tc.want) {
			t.Errorf("splitWords(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c := parseConfig([]byte(`# leading comment
global
    daemon

defaults
    mode http
frontend fe
    bind :80
backend be   # trailing
    server a 10.0.0.1:80
`))
	var got []string
	for _, s := range c.sections {
		got = append(got, s.kind+" "+s.name+" "+strings.Join(func() []string {
			var l []string
			for _, x := range s.lines {
				l = append(l, x.String())
			}
			return l
		}(), "|"))
	}
	want := []string{"global  daemon", "defaults  mode http", "frontend fe bind :80", "backend be server a 10.0.0.1:80"}
	if !slices.Equal(got, want) {
		t.Errorf("sections = %q, want %q", got, want)
	}
}

func TestParseAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		ip   string
		port int
	}{
		{"10.0.0.1:8080", "10.0.0.1", 8080},
		{"ipv4@10.0.0.1:80", "10.0.0.1", 80},
		{"[2001:db8::1]:443", "2001:db8::1", 443},
		{"ipv6@2001:db8::1:443", "2001:db8::1", 443},
		{"::1:80", "::1", 80},
		{"10.0.0.1", "", 0},
		{"10.0.0.1:+100", "", 0},
		{"10.0.0.1:1000-2000", "", 0},
		{"10.0.0.1:0", "", 0},
		{"backend.svc:80", "", 0},
		{"${ADDR}:80", "", 0},
		{"unix@/run/x.sock", "", 0},
	} {
		ip, port := parseAddress(tc.in)
		gotIP := ""
		if ip.IsValid() {
			gotIP = ip.String()
		}
		if gotIP != tc.ip || port != tc.port {
			t.Errorf("parseAddress(%q) = %q %d, want %q %d", tc.in, gotIP, port, tc.ip, tc.port)
		}
	}
}

const cfgBase = `global
    stats socket /run/admin.sock level admin
defaults
    mode http
    # a comment
frontend fe
    bind :80
    default_backend be
backend be
    balance roundrobin
    server SRV_1 10.0.0.1:80 check
    server SRV_2 127.0.0.1:1 disabled
    server SRV_3 127.0.0.1:1 weight 5 disabled
listen stats
    bind :8404
    server s 10.0.0.9:80
peers p
    peer a 10.0.0.1:1024
    server b 10.0.0.2:1024
`

func TestDiffConfig(t *testing.T) {
	t.Parallel()
	edit := func(old, new string) string {
		if !strings.Contains(cfgBase, old) {
			t.Fatalf("base has no %q", old)
		}
		return strings.Replace(cfgBase, old, new, 1)
	}
	for _, tc := range []struct {
		name      string
		cfg       string
		ops       []string // nil with structure set
		structure string   // a part of the detail
	}{
		{name: "identical", cfg: cfgBase},
		{name: "comments and blanks only", cfg: edit("    # a comment\n", "\n\n    # another\n") + "# end\n"},
		{name: "address and port", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 10.0.0.7:8080 check"),
			ops: []string{"set server be/SRV_1 addr 10.0.0.7 port 8080"}},
		{name: "same address spelled differently", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 ipv4@10.0.0.1:80 check")},
		{name: "enable a slot", cfg: edit("SRV_2 127.0.0.1:1 disabled", "SRV_2 10.0.0.2:80"),
			ops: []string{"set server be/SRV_2 addr 10.0.0.2 port 80", "set server be/SRV_2 state ready"}},
		{name: "disable a server", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 10.0.0.1:80 check disabled"),
			ops: []string{"set server be/SRV_1 state maint"}},
		{name: "enabled keyword", cfg: edit("SRV_2 127.0.0.1:1 disabled", "SRV_2 127.0.0.1:1 enabled"),
			ops: []string{"set server be/SRV_2 state ready"}},
		{name: "weight", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 10.0.0.1:80 weight 7 check"),
			ops: []string{"set server be/SRV_1 weight 7"}},
		{name: "explicit default weight is no change", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 10.0.0.1:80 check weight 1")},
		{name: "leaving service: maint first", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 127.0.0.1:1 check disabled"),
			ops: []string{"set server be/SRV_1 state maint", "set server be/SRV_1 addr 127.0.0.1 port 1"}},
		{name: "entering service: ready last", cfg: edit("SRV_3 127.0.0.1:1 weight 5 disabled", "SRV_3 10.0.0.3:81 weight 2"),
			ops: []string{"set server be/SRV_3 addr 10.0.0.3 port 81", "set server be/SRV_3 weight 2", "set server be/SRV_3 state ready"}},
		{name: "server in listen", cfg: edit("server s 10.0.0.9:80", "server s 10.0.0.8:80"),
			ops: []string{"set server stats/s addr 10.0.0.8 port 80"}},
		{name: "server in peers is not a backend server", cfg: edit("server b 10.0.0.2:1024", "server b 10.0.0.3:1024"), structure: "peers p"},
		{name: "server renamed", cfg: edit("SRV_2 127.0.0.1:1 disabled", "SRV_9 127.0.0.1:1 disabled"), structure: "line 12"},
		{name: "server added", cfg: edit("    server SRV_2 127.0.0.1:1 disabled\n", "    server SRV_2 127.0.0.1:1 disabled\n    server SRV_4 127.0.0.1:1 disabled\n"), structure: "added or removed"},
		{name: "server reordered", cfg: edit("    server SRV_1 10.0.0.1:80 check\n    server SRV_2 127.0.0.1:1 disabled\n", "    server SRV_2 127.0.0.1:1 disabled\n    server SRV_1 10.0.0.1:80 check\n"), structure: "changed"},
		{name: "other server setting", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 10.0.0.1:80 check inter 5s"), structure: "settings other"},
		{name: "hostname address", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 app.svc:80 check"), structure: "literal"},
		{name: "directive", cfg: edit("balance roundrobin", "balance leastconn"), structure: "backend be"},
		{name: "section renamed", cfg: edit("\nbackend be\n", "\nbackend be2\n"), structure: "became"},
		{name: "section added", cfg: cfgBase + "backend more\n", structure: "sections changed"},
		{name: "global", cfg: edit("level admin", "level operator"), structure: "global"},
		{name: "conditional block", cfg: cfgBase + ".if defined(X)\n.endif\n", structure: "conditional"},
		{name: "bad weight", cfg: edit("SRV_1 10.0.0.1:80 check", "SRV_1 10.0.0.1:80 weight x check"), structure: "weight"},
	} {
		changes, err := diffConfig([]byte(cfgBase), []byte(tc.cfg))
		var se *structureError
		if tc.structure != "" {
			if !errors.As(err, &se) || !strings.Contains(se.detail, tc.structure) {
				t.Errorf("%s: err = %v, want a structure error mentioning %q", tc.name, err, tc.structure)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, c := range changes {
			for _, o := range c.ops() {
				got = append(got, o.cmd)
			}
		}
		if !slices.Equal(got, tc.ops) {
			t.Errorf("%s: ops = %q, want %q", tc.name, got, tc.ops)
		}
	}
}

func TestDiffConfigDefaultServer(t *testing.T) {
	t.Parallel()
	base := "backend be\n    default-server weight 10\n    server a 10.0.0.1:80\n"
	if _, err := diffConfig([]byte(base), []byte(strings.Replace(base, "10.0.0.1:80", "10.0.0.1:80 weight 3", 1))); err == nil {
		t.Error("weight given on one side only with default-server weight: no structure error")
	}
	changes, err := diffConfig([]byte(strings.Replace(base, "10.0.0.1:80", "10.0.0.1:80 weight 4", 1)),
		[]byte(strings.Replace(base, "10.0.0.1:80", "10.0.0.1:80 weight 3", 1)))
	if err != nil || len(changes) != 1 || changes[0].ops()[0].cmd != "set server be/a weight 3" {
		t.Errorf("explicit weights on both sides: %v %v", changes, err)
	}
}

func TestDiffMap(t *testing.T) {
	t.Parallel()
	m := func(s string) []mapEntry { return mapfile.Parse([]byte(s)) }
	for _, tc := range []struct {
		name         string
		old, new     string
		orderMatters bool
		want         mapPlan
	}{
		{name: "same", old: "a 1\nb 2\n", new: "a 1\nb 2\n"},
		{name: "set", old: "a 1\nb 2\n", new: "a 1\nb 3\n", want: mapPlan{sets: []mapEntry{{Key: "b", Value: "3"}}}},
		{name: "add and del", old: "a 1\nb 2\nc 3\n", new: "a 1\nc 3\nd 4\n",
			want: mapPlan{adds: []mapEntry{{Key: "d", Value: "4"}}, dels: []string{"b"}}},
		{name: "insert in the middle, order irrelevant", old: "a 1\nc 3\n", new: "a 1\nb 2\nc 3\n",
			want: mapPlan{adds: []mapEntry{{Key: "b", Value: "2"}}}},
		{name: "insert in the middle, order matters", old: "a 1\nc 3\n", new: "a 1\nb 2\nc 3\n", orderMatters: true,
			want: mapPlan{replace: true}},
		{name: "append, order matters", old: "a 1\nc 3\n", new: "a 1\nc 3\nb 2\n", orderMatters: true,
			want: mapPlan{adds: []mapEntry{{Key: "b", Value: "2"}}}},
		{name: "reorder, order matters", old: "a 1\nb 2\n", new: "b 2\na 1\n", orderMatters: true, want: mapPlan{replace: true}},
		{name: "reorder, order irrelevant", old: "a 1\nb 2\n", new: "b 2\na 1\n"},
		{name: "duplicate key", old: "a 1\n", new: "a 1\na 2\n", want: mapPlan{replace: true}},
		{name: "everything changed", old: "a 1\nb 2\nc 3\n", new: "x 1\ny 2\nz 3\n", want: mapPlan{replace: true}},
	} {
		got := diffMap(m(tc.old), m(tc.new), tc.orderMatters)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: diffMap = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestMapOps(t *testing.T) {
	t.Parallel()
	newM := []mapEntry{{Key: "a", Value: "1"}, {Key: "b c", Value: "x;y"}}
	ops := mapPlan{adds: []mapEntry{{Key: "k", Value: "v w"}}, sets: []mapEntry{{Key: "a", Value: "1"}}, dels: []string{"z;"}}.ops("/d/m.map", "m.map", newM)
	var got []string
	for _, o := range ops {
		got = append(got, o.cmd)
	}
	want := []string{`add map /d/m.map k v\ w`, `set map /d/m.map a 1`, `del map /d/m.map z\;`}
	if !slices.Equal(got, want) {
		t.Errorf("ops = %q, want %q", got, want)
	}

	big := make([]mapEntry, 2000)
	for i := range big {
		big[i] = mapEntry{Key: strings.Repeat("k", 10) + string(rune('a'+i%26)), Value: strings.Repeat("v", 20)}
	}
	ops = mapPlan{replace: true}.ops("/d/m.map", "m.map", big)
	if len(ops) < 4 || !ops[0].version || ops[len(ops)-1].withVersion == nil {
		t.Fatalf("replace ops = %+v", ops)
	}
	total := 0
	for _, o := range ops[1 : len(ops)-1] {
		if len(o.payload) > maxPayload {
			t.Errorf("payload of %d bytes", len(o.payload))
		}
		total += strings.Count(string(o.payload), "\n")
		cmd, _ := o.withVersion("7")
		if cmd != "add map @7 /d/m.map" {
			t.Errorf("cmd = %q", cmd)
		}
	}
	if total != len(big) {
		t.Errorf("%d entries in the payloads, want %d", total, len(big))
	}
	if cmd, show := ops[len(ops)-1].withVersion("7"); cmd != "commit map @7 /d/m.map" || show != "commit map @7 m.map" {
		t.Errorf("commit = %q %q", cmd, show)
	}
}

func TestParseShowProc(t *testing.T) {
	t.Parallel()
	out := `#<PID>          <type>          <reloads>       <uptime>        <version>
14750           master          2 [failed: 1]   0d00h00m12s     2.6.12-1+deb12u4
# workers
15213           worker          1               0d00h00m04s     2.6.12-1+deb12u4
# old workers
14784           worker          2               0d00h00m10s     2.6.12-1+deb12u4
# programs

`
	st, err := parseShowProc(out)
	want := procState{master: 14750, reloads: 2, failed: 1, workers: []int{15213}, old: []int{14784}}
	if err != nil || !reflect.DeepEqual(st, want) {
		t.Errorf("parseShowProc = %+v, %v; want %+v", st, err, want)
	}
	if _, err := parseShowProc(""); !errors.Is(err, errBusy) {
		t.Errorf("empty answer: %v, want errBusy", err)
	}
	if _, err := parseShowProc("Unknown command\n"); err == nil {
		t.Error("no error for an answer without a master")
	}
}

func TestEscapeArg(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":     "plain",
		"a b":       `a\ b`,
		"a;b":       `a\;b`,
		`a\b`:       `a\\b`,
		"tab\there": "tab\\\there",
	} {
		if got := escapeArg(in); got != want {
			t.Errorf("escapeArg(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPayloadLines(t *testing.T) {
	t.Parallel()
	got := string(payloadLines([]byte("-----BEGIN X-----\r\nabc\r\n-----END X-----\r\n\r\n  \n-----BEGIN Y-----\nd\n-----END Y-----")))
	want := "-----BEGIN X-----\nabc\n-----END X-----\n-----BEGIN Y-----\nd\n-----END Y-----\n"
	if got != want {
		t.Errorf("payloadLines = %q, want %q", got, want)
	}
}

func TestBundlePathOf(t *testing.T) {
	t.Parallel()
	d := &Driver{opts: Options{HAProxyDir: "/etc/haproxy"}}
	for in, want := range map[string]string{
		"/etc/haproxy/maps/host.map":   "maps/host.map",
		"maps/host.map":                "maps/host.map",
		"/etc/haproxy/../other/x.map":  "",
		"/etc/haproxyx/maps/host.map":  "",
		"/etc/haproxy":                 "",
		"/etc/haproxy/certs/./site.pm": "certs/site.pm",
	} {
		got, ok := d.bundlePathOf(in)
		if ok != (want != "") || got != want {
			t.Errorf("bundlePathOf(%q) = %q %v, want %q", in, got, ok, want)
		}
	}
}

// TestParseStat reads a "show stat" answer of HAProxy 2.6 (columns cut
// down to those that matter and a few around them).
func TestParseStat(t *testing.T) {
	out := "# pxname,svname,qcur,status,type,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,\n" +
		"fe_http,FRONTEND,,OPEN,0,0,90,0,3,7,0,\n" +
		"be_app,SRV_1,0,DOWN,2,0,40,0,0,2,0,\n" +
		"be_app,SRV_2,0,UP 1/3,2,0,50,0,3,0,0,\n" +
		"be_app,BACKEND,0,UP,1,0,90,0,3,7,0,\n\n"
	got, err := parseStat(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Stat{
		{Proxy: "fe_http", Name: "FRONTEND", Type: "frontend", Status: "OPEN", Responses: 100, Err5xx: 7},
		{Proxy: "be_app", Name: "SRV_1", Type: "server", Status: "DOWN", Responses: 42, Err5xx: 2},
		{Proxy: "be_app", Name: "SRV_2", Type: "server", Status: "UP 1/3", Responses: 53},
		{Proxy: "be_app", Name: "BACKEND", Type: "backend", Status: "UP", Responses: 100, Err5xx: 7},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if _, err := parseStat("Unknown command\n"); err == nil {
		t.Error("an answer without the columns parsed")
	}
}

func TestInfoStoppedListening(t *testing.T) {
	t.Parallel()
	info := func(stopping, listeners, unstoppable string) string {
		var b strings.Builder
		b.WriteString("Name: HAProxy\nPid: 7737\nProcess_num: 1\n")
		if stopping != "" {
			b.WriteString("Stopping: " + stopping + "\n")
		}
		b.WriteString("Jobs: 3\n")
		if unstoppable != "" {
			b.WriteString("Unstoppable Jobs: " + unstoppable + "\n")
		}
		if listeners != "" {
			b.WriteString("Listeners: " + listeners + "\n")
		}
		return b.String()
	}
	cases := []struct {
		name string
		out  string
		want bool
	}{
		// As a 2.6 worker answers after a reload, holding a WebSocket.
		{"stopping, only its master link", info("1", "1", "1"), true},
		{"stopping, no listener", info("1", "0", "1"), true},
		{"stopping, still listening", info("1", "4", "1"), false},
		{"running", info("0", "4", "1"), false},
		{"running without listeners", info("0", "0", "1"), false},
		{"no Stopping field", info("", "1", "1"), false},
		{"no Listeners field", info("1", "", "1"), false},
		{"no Unstoppable Jobs field", info("1", "1", ""), false},
		{"not an answer", "Unknown command.\n", false},
		{"empty", "", false},
	}
	for _, c := range cases {
		if got := infoStoppedListening(c.out); got != c.want {
			t.Errorf("%s: infoStoppedListening = %v, want %v\n%s", c.name, got, c.want, c.out)
		}
	}
}
