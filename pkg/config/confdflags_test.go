package config_test

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// TestParseConfdPrecedence: flags over CONFD_* over confd's TOML file over
// confd's defaults, setting by setting; list settings are replaced whole
// by a higher layer.
func TestParseConfdPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "confd.toml")
	err := os.WriteFile(file, []byte(`backend = "redis"
confdir = "/srv/confd"
interval = 30
prefix = "/from-file"
nodes = ["10.0.0.1:6379/2"]
log-level = "debug"
watch = true
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defaults := config.ConfdSettings{Backend: "etcd", ConfDir: "/etc/confd", Interval: 600, Scheme: "http", ConfigFile: filepath.Join(dir, "absent.toml")}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want func(*config.ConfdSettings)
	}{
		{"defaults (no file)", []string{"-config-file", filepath.Join(dir, "absent.toml")}, nil, func(*config.ConfdSettings) {}},
		{"file over defaults", []string{"-config-file", file}, nil, func(s *config.ConfdSettings) {
			s.Backend, s.ConfDir, s.Interval, s.Prefix, s.Nodes, s.LogLevel, s.Watch, s.ConfigFile = "redis", "/srv/confd", 30, "/from-file", []string{"10.0.0.1:6379/2"}, "debug", true, file
		}},
		{"environment over file", nil, map[string]string{"CONFD_CONFIG_FILE": file, "CONFD_PREFIX": "/from-env", "CONFD_NODE": "a:1, b:2", "CONFD_INTERVAL": "5", "CONFD_BACKEND": "etcdv3"}, func(s *config.ConfdSettings) {
			s.Backend, s.ConfDir, s.Interval, s.Prefix, s.Nodes, s.LogLevel, s.Watch, s.ConfigFile = "etcdv3", "/srv/confd", 5, "/from-env", []string{"a:1", "b:2"}, "debug", true, file
		}},
		{"flags over environment", []string{"-config-file", file, "-prefix", "/from-flag", "-node", "c:3", "-node", "d:4", "-onetime", "-sync-only", "-batch-interval", "2"}, map[string]string{"CONFD_PREFIX": "/from-env", "CONFD_NODE": "a:1", "CONFD_BACKEND": "etcdv3"}, func(s *config.ConfdSettings) {
			s.Backend, s.ConfDir, s.Interval, s.Prefix, s.Nodes, s.LogLevel, s.Watch, s.ConfigFile = "etcdv3", "/srv/confd", 30, "/from-flag", []string{"c:3", "d:4"}, "debug", true, file
			s.OneTime, s.SyncOnly, s.BatchInterval = true, true, 2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := config.ParseConfd(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			want := defaults
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestParseConfdRefuses: what weft cannot carry out is refused, naming
// the flag or the file's key.
func TestParseConfdRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "confd.toml")
	if err := os.WriteFile(bad, []byte("backend = \"env\"\nintervall = 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	none := []string{"-config-file", filepath.Join(dir, "absent.toml")}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-config-file", bad}, "unknown keys intervall"},
		{append(none, "-backend", "dynamodb"), `-backend "dynamodb" is not one weft reads (known: consul, env, etcd, etcdv3, file, natskv, redis, zookeeper)`},
		{append(none, "-backend", "file"), "-backend file needs -file"},
		{append(none, "-backend", "natskv"), "-backend natskv needs -table"},
		{append(none, "-backend", "redis", "-node", "a:1", "-node", "b:2"), "weft's redis source reads one node"},
		{append(none, "-backend", "consul", "-node", "a:1", "-node", "b:2"), "weft's consul source reads one agent"},
		{append(none, "-backend", "consul", "-username", "u", "-password", "p"), "give the token in CONSUL_HTTP_TOKEN, or its file in CONSUL_HTTP_TOKEN_FILE"},
		{append(none, "-client-cert", "c.pem"), "weft's etcd source has no client TLS settings"},
		{append(none, "-interval", "0"), "-interval 0"},
		{append(none, "-log-level", "loud"), `-log-level "loud"`},
		{append(none, "-scheme", "ftp"), `-scheme "ftp"`},
		{append(none, "extra"), "unexpected arguments"},
	} {
		_, err := config.ParseConfd(tc.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestParseConfdModes: -noop and -keep-stage-file are taken with or
// without -onetime, as confd takes them.
func TestParseConfdModes(t *testing.T) {
	none := []string{"-config-file", filepath.Join(t.TempDir(), "absent.toml"), "-backend", "env"}
	for _, args := range [][]string{
		{"-noop"},
		{"-noop", "-onetime"},
		{"-keep-stage-file"},
		{"-keep-stage-file", "-onetime"},
		{"-keep-stage-file", "-noop", "-watch"},
	} {
		if _, err := config.ParseConfd(append(none, args...), func(string) string { return "" }, io.Discard); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// TestConfdWeft: each backend becomes its value source, read every
// -interval and following changes only with -watch; the confdir one
// confd target; and the configuration loads through the real loader.
func TestConfdWeft(t *testing.T) {
	confdir, err := filepath.Abs("testdata/confd")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want config.Source
	}{
		{[]string{"-backend", "env"}, config.Source{Name: "env", Type: config.SourceEnv, Poll: true}},
		{[]string{"-backend", "env", "-watch"}, config.Source{Name: "env", Type: config.SourceEnv}},
		{[]string{"-backend", "file", "-file", "/v.yaml"}, config.Source{Name: "file", Type: config.SourceFile, Path: "/v.yaml", Poll: true}},
		{[]string{"-backend", "file", "-file", "/v.yaml", "-watch"}, config.Source{Name: "file", Type: config.SourceFile, Path: "/v.yaml"}},
		{[]string{"-backend", "etcd"}, config.Source{Name: "etcd", Type: config.SourceEtcd, Endpoints: []string{"http://127.0.0.1:2379"}, Poll: true}},
		{[]string{"-backend", "etcdv3", "-node", "10.0.0.1:2379", "-scheme", "https", "-username", "u", "-password", "p", "-watch"}, config.Source{Name: "etcdv3", Type: config.SourceEtcd, Endpoints: []string{"https://10.0.0.1:2379"}, Username: "u", PasswordEnv: config.ConfdPasswordEnv}},
		{[]string{"-backend", "redis", "-node", "10.0.0.2:6379/3", "-watch"}, config.Source{Name: "redis", Type: config.SourceRedis, Address: "10.0.0.2:6379", Database: 3}},
		{[]string{"-backend", "natskv", "-table", "conf", "-node", "nats://n:4222"}, config.Source{Name: "natskv", Type: config.SourceNATSKV, Bucket: "conf", Address: "nats://n:4222", Poll: true}},
		{[]string{"-backend", "consul", "-watch"}, config.Source{Name: "consul", Type: config.SourceConsul, Address: "127.0.0.1:8500"}},
		{[]string{"-backend", "consul", "-node", "c:8501", "-scheme", "https"}, config.Source{Name: "consul", Type: config.SourceConsul, Address: "https://c:8501", Poll: true}},
		{[]string{"-backend", "zookeeper", "-node", "z1:2181", "-node", "z2:2181", "-username", "u", "-password", "p", "-watch"}, config.Source{Name: "zookeeper", Type: config.SourceZookeeper, Endpoints: []string{"z1:2181", "z2:2181"}, Username: "u", PasswordEnv: config.ConfdPasswordEnv}},
	} {
		args := append([]string{"-config-file", filepath.Join(t.TempDir(), "none.toml"), "-confdir", confdir, "-interval", "30", "-prefix", "/app", "-batch-interval", "3", "-sync-only", "-keep-stage-file"}, tc.args...)
		s, err := config.ParseConfd(args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		text, err := s.Weft()
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.ParseFile("weft confd", text, t.TempDir())
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.args, err, text)
		}
		want := tc.want
		want.Rescan, want.Resync = config.Duration(30e9), config.Duration(config.DefaultResync)
		if len(cfg.Sources) != 1 || !reflect.DeepEqual(cfg.Sources[0], want) {
			t.Errorf("%q: sources %+v, want %+v", tc.args, cfg.Sources, want)
		}
		if len(cfg.Targets) == 0 {
			t.Fatalf("%q: no targets", tc.args)
		}
		for name, tg := range cfg.Targets {
			if !strings.HasPrefix(name, config.ConfdTarget+"-") || tg.Confd.Prefix != "/app" {
				t.Errorf("target %s: confd %+v", name, tg.Confd)
			}
			if tg.Deploy.CheckCmd != "" || tg.Deploy.ReloadCmd != "" {
				t.Errorf("target %s: -sync-only left check %q reload %q", name, tg.Deploy.CheckCmd, tg.Deploy.ReloadCmd)
			}
			if !tg.Deploy.KeepStaged {
				t.Errorf("target %s: -keep-stage-file does not keep the staged file", name)
			}
			if tg.Render.Wait().Seconds() != 3 || tg.Render.LeadingEdge() || tg.Render.MaxWait.D().Seconds() != 3 {
				t.Errorf("target %s: -batch-interval 3 gave render %+v", name, tg.Render)
			}
		}
	}
}
