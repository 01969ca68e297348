package haproxycheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The outputs below were captured from haproxy 2.6.12 -c runs.
func TestParseOutput(t *testing.T) {
	const tmp = "/tmp/weft-haproxycheck-123"
	tests := []struct {
		name   string
		out    string
		failed bool
		want   []Problem
	}{
		{
			name:   "valid",
			out:    "Configuration file is valid\n",
			failed: false,
			want:   nil,
		},
		{
			name: "unknown keyword with summaries",
			out: `[NOTICE]   (3826) : haproxy version is 2.6.12-1+deb12u4
[NOTICE]   (3826) : path to executable is /usr/sbin/haproxy
[ALERT]    (3826) : config : parsing [/tmp/weft-haproxycheck-123/haproxy.cfg:12] : unknown keyword 'foo' in 'defaults' section
[ALERT]    (3826) : config : Error(s) found in configuration file : /tmp/weft-haproxycheck-123/haproxy.cfg
[ALERT]    (3826) : config : Fatal errors found in configuration.
`,
			failed: true,
			want: []Problem{
				{File: "haproxy.cfg", Line: 12, Severity: SeverityAlert, Message: "unknown keyword 'foo' in 'defaults' section"},
			},
		},
		{
			name: "location without parsing and paths in message",
			out: `[ALERT]    (3914) : config : [/tmp/weft-haproxycheck-123/haproxy.cfg:17] : 'server be/s3' : Couldn't open the ca-file '/tmp/weft-haproxycheck-123/certs/ca.pem' (No such file or directory).
[ALERT]    (3914) : config : 'ca-file' : unable to load /tmp/weft-haproxycheck-123/certs/ca.pem.
[ALERT]    (3914) : config : http frontend 'fe' (/tmp/weft-haproxycheck-123/haproxy.cfg:6) tries to use incompatible tcp backend 'tcpbe' (/tmp/weft-haproxycheck-123/haproxy.cfg:14) in a 'use_backend' rule (see 'mode').
`,
			failed: true,
			want: []Problem{
				{File: "haproxy.cfg", Line: 17, Severity: SeverityAlert, Message: "'server be/s3' : Couldn't open the ca-file 'certs/ca.pem' (No such file or directory)."},
				{Severity: SeverityAlert, Message: "'ca-file' : unable to load certs/ca.pem."},
				{Severity: SeverityAlert, Message: "http frontend 'fe' (haproxy.cfg:6) tries to use incompatible tcp backend 'tcpbe' (haproxy.cfg:14) in a 'use_backend' rule (see 'mode')."},
			},
		},
		{
			name: "capitalised Parsing and colon without space",
			out: `[ALERT]    (4119) : config : Parsing [/tmp/weft-haproxycheck-123/haproxy.cfg:14]: backend 'be' has the same name as backend 'be' declared at /tmp/weft-haproxycheck-123/haproxy.cfg:12.
[WARNING]  (4007) : config : parsing [/tmp/weft-haproxycheck-123/haproxy.cfg:3]: 'this is a warning directive'.
`,
			failed: true,
			want: []Problem{
				{File: "haproxy.cfg", Line: 14, Severity: SeverityAlert, Message: "backend 'be' has the same name as backend 'be' declared at haproxy.cfg:12."},
				{File: "haproxy.cfg", Line: 3, Severity: SeverityWarning, Message: "'this is a warning directive'."},
			},
		},
		{
			name: "warnings with continuation lines on a valid config",
			out: `Warnings were found.
Configuration file is valid
[NOTICE]   (3885) : haproxy version is 2.6.12-1+deb12u4
[WARNING]  (3885) : config : missing timeouts for frontend 'fe'.
   | While not properly invalid, you will certainly encounter various problems
   | with such a configuration.
[WARNING]  (3885) : config : 'http-request' rules ignored for frontend 'fe' as they require HTTP mode.
`,
			failed: false,
			want: []Problem{
				{Severity: SeverityWarning, Message: "missing timeouts for frontend 'fe'. While not properly invalid, you will certainly encounter various problems with such a configuration."},
				{Severity: SeverityWarning, Message: "'http-request' rules ignored for frontend 'fe' as they require HTTP mode."},
			},
		},
		{
			name: "blank line after a message and continuation of a dropped notice",
			out: `[NOTICE]   (1) : something
   | more of the notice
[ALERT]    (3909) : config : [/tmp/weft-haproxycheck-123/haproxy.cfg:15] : 'server be/s2' : invalid character 'n' in port number 'notaport' in '127.0.0.1:notaport'

[ALERT]    (3909) : config : Error(s) found in configuration file : /tmp/weft-haproxycheck-123/haproxy.cfg
`,
			failed: true,
			want: []Problem{
				{File: "haproxy.cfg", Line: 15, Severity: SeverityAlert, Message: "'server be/s2' : invalid character 'n' in port number 'notaport' in '127.0.0.1:notaport'"},
			},
		},
		{
			name:   "summary kept when it is the only alert",
			out:    "[ALERT]    (1) : config : Fatal errors found in configuration.\n",
			failed: true,
			want:   []Problem{{Severity: SeverityAlert, Message: "Fatal errors found in configuration."}},
		},
		{
			name:   "untagged no-listener line",
			out:    "Configuration file has no error but will not start (no listener) => exit(2).\n",
			failed: true,
			want:   []Problem{{Severity: SeverityAlert, Message: "Configuration file has no error but will not start (no listener) => exit(2)."}},
		},
		{
			name:   "untagged line on success is a warning",
			out:    "hello from a lua print\nConfiguration file is valid\n",
			failed: false,
			want:   []Problem{{Severity: SeverityWarning, Message: "hello from a lua print"}},
		},
		{
			name: "lua log lines",
			out: `[alert] 324/103959 (4007) : lua ran at /tmp/weft-haproxycheck-123/x.lua
[info] 324/103959 (4007) : dropped
[warning] 324/103959 (4007) : careful
`,
			failed: false,
			want: []Problem{
				{Severity: SeverityAlert, Message: "lua ran at x.lua"},
				{Severity: SeverityWarning, Message: "careful"},
			},
		},
		{
			name:   "file outside the temp dir keeps its path",
			out:    "[ALERT]    (1) : config : parsing [/etc/other.cfg:3] : boom\n",
			failed: true,
			want:   []Problem{{File: "/etc/other.cfg", Line: 3, Severity: SeverityAlert, Message: "boom"}},
		},
		{
			name:   "bare temp dir",
			out:    "[WARNING]  (1) : config : chdir to /tmp/weft-haproxycheck-123 ignored\n",
			failed: false,
			want:   []Problem{{Severity: SeverityWarning, Message: "chdir to . ignored"}},
		},
		{
			name:   "CRLF line endings",
			out:    "[ALERT]    (1) : config : parsing [/tmp/weft-haproxycheck-123/haproxy.cfg:2] : bad\r\n",
			failed: true,
			want:   []Problem{{File: "haproxy.cfg", Line: 2, Severity: SeverityAlert, Message: "bad"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseOutput([]byte(tt.out), tt.failed, []string{tmp})
			if !sameProblems(got, tt.want) {
				t.Errorf("got:%s\nwant:%s", dump(got), dump(tt.want))
			}
		})
	}
}

func TestMapTempLongestAliasFirst(t *testing.T) {
	aliases := []string{"/private/tmp/x", "/tmp/x"}
	got := mapTemp("a /private/tmp/x/maps/a.map b /tmp/x/maps/b.map", aliases)
	if want := "a maps/a.map b maps/b.map"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLayoutRewritesOnlyMain(t *testing.T) {
	main := "global\n  crt-base /etc/haproxy/certs\nfrontend f\n  bind :443 ssl crt-list /etc/haproxy/certs/list.txt\n"
	list := "/etc/haproxy/certs/site.pem\n"
	b, err := prepare([]File{
		{Path: "haproxy.cfg", Content: []byte(main)},
		{Path: "certs/list.txt", Content: []byte(list)},
		{Path: "./maps//host.map", Content: []byte("a b\n")},
	}, "haproxy.cfg", "/etc/haproxy/")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := b.layout(dir); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		data, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got, want := read("haproxy.cfg"), strings.ReplaceAll(main, "/etc/haproxy/", dir+"/"); got != want {
		t.Errorf("main config:\ngot  %q\nwant %q", got, want)
	}
	if got := read("certs/list.txt"); got != list {
		t.Errorf("non-main file was changed: %q", got)
	}
	if got := read("maps/host.map"); got != "a b\n" {
		t.Errorf("cleaned path not written: %q", got)
	}
	for _, p := range []string{"haproxy.cfg", "certs/list.txt"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
}

func TestCappedBuffer(t *testing.T) {
	w := &cappedBuffer{max: 5}
	for _, s := range []string{"abc", "defg", "hi"} {
		n, err := w.Write([]byte(s))
		if err != nil || n != len(s) {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if w.String() != "abcde" || w.dropped != 4 {
		t.Errorf("kept %q dropped %d, want \"abcde\" and 4", w.String(), w.dropped)
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{File: "haproxy.cfg", Line: 3, Severity: SeverityAlert, Message: "m"}, "haproxy.cfg:3: alert: m"},
		{Problem{File: "haproxy.cfg", Severity: SeverityWarning, Message: "m"}, "haproxy.cfg: warning: m"},
		{Problem{Severity: SeverityAlert, Message: "m"}, "alert: m"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.p, got, tt.want)
		}
	}
}
