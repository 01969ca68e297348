package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/svc/liveconfig"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
	pullercontroller "github.com/weftio/weft/services/puller/controller"
)

// violations collects the errors the server sends connections (a refused
// publish or subscription arrives this way).
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(role msg.Role) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.errs = append(v.errs, string(role)+": "+err.Error())
	})
}

func (v *violations) String() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return strings.Join(v.errs, "\n")
}

// roleBus connects to url as role, with its nkey seed from keys.
func roleBus(t *testing.T, url, keys string, role msg.Role, v *violations) *testkit.Bus {
	t.Helper()
	opts, err := natsauth.Client{NKey: natsauth.SeedFile(keys, role)}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, append(opts, nats.Name("weft "+string(role)), v.handler(role))...)
	if err != nil {
		t.Fatalf("%s connects: %v", role, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &testkit.Bus{NC: nc, JS: js, URL: url}
}

// TestEveryServiceOnItsOwnUser runs the quickstart with every service on
// its own NATS user of a real nats-server whose users are what `weft
// nats-config` generates: `weft provision` makes the streams with the
// provisioner's key (the renderer's is refused at once), the services,
// each run as its binary runs it with --nats-nkey and --provision=false,
// render, validate and deploy a manifest edit, check and swap in an edit
// of weft.yaml, the deployer answers a status request, `weft status` runs
// as the auditor, and the server refused nothing any of them did.
func TestEveryServiceOnItsOwnUser(t *testing.T) {
	keys := t.TempDir()
	var conf bytes.Buffer
	if err := run([]string{"nats-config", "--keys", keys}, &conf, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	srv := testkit.NATSServer(t, conf.String())
	var out, errOut bytes.Buffer
	if err := run([]string{"provision", "--nats-url", srv.URL, "--nats-nkey", natsauth.SeedFile(keys, msg.RoleProvisioner)}, &out, &errOut); err != nil {
		t.Fatalf("weft provision: %v\n%s", err, errOut.String())
	}

	s := &stack{t: t, dir: t.TempDir()}
	copyTree(t, quickstart, s.dir)
	cfg, err := config.Load(filepath.Join(s.dir, "weft.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg
	var v violations
	s.bus = roleBus(t, srv.URL, keys, msg.RoleAdmin, &v)
	// Each service as its own binary runs it: host.Run on the settings
	// its flags give, with its role's nkey and nothing provisioned.
	for _, sv := range Services {
		role := msg.Role(sv.Name)
		if sv.Name == pullercontroller.Service {
			role = msg.RolePullerController // weft-puller controller's user
		}
		if _, err := msg.AccessOf(role); err != nil {
			t.Fatalf("service %s has no role: %v", sv.Name, err)
		}
		var set host.Settings
		fs := flag.NewFlagSet(sv.Name, flag.ContinueOnError)
		set.Flags(fs, false)
		err := fs.Parse([]string{"--config", filepath.Join(s.dir, "weft.yaml"), "--nats-url", srv.URL,
			"--nats-nkey", natsauth.SeedFile(keys, role), "--provision=false", "--listen", "127.0.0.1:0", "--log-level", "warn"})
		if err != nil {
			t.Fatal(err)
		}
		stop := testkit.Run(t, func(ctx context.Context) error {
			return host.Run(ctx, set, host.Binary{Name: "weft-" + sv.Name, Services: []host.Service{sv}, Reload: make(chan os.Signal)})
		})
		t.Cleanup(stop)
	}
	waitFor(t, "first deploy", func() error {
		return contains(s.read("haproxy.cfg"), "server web-2 127.0.0.2:8080")
	})
	s.editManifest("endpoints.yaml", "127.0.0.2", "127.0.0.9")
	waitFor(t, "the edit deployed", func() error {
		return contains(s.read("haproxy.cfg"), "server web-2 127.0.0.9:8080")
	})
	waitFor(t, "deploy status", func() error {
		tr := s.target("quickstart")
		if len(tr.Deploys) != 1 || tr.Deploys[0].Version < 2 || tr.Validation == nil || !tr.Validation.OK {
			return fmt.Errorf("status %+v", tr)
		}
		return nil
	})

	// An edit of weft.yaml is checked by every process through the
	// validator (the candidate stored, weft.validate._config asked, the
	// verdict kept under the status key "config"), then swapped in.
	yaml := filepath.Join(s.dir, "weft.yaml")
	data, err := os.ReadFile(yaml)
	if err != nil {
		t.Fatal(err)
	}
	edited := string(data) + "\n# edited\n"
	if err := os.WriteFile(yaml, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the edited configuration checked", func() error {
		kv, err := s.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
		if err != nil {
			return err
		}
		e, err := kv.Get(context.Background(), msg.ConfigStatusKey)
		if err != nil {
			return err
		}
		var st msg.ConfigStatus
		if err := msg.Decode(e.Value(), &st); err != nil {
			return err
		}
		if st.Candidate != liveconfig.Hash(edited) || !st.OK {
			return fmt.Errorf("config status %+v", st)
		}
		return nil
	})

	// The deployer answers weft.api.status (replies allowed only to the
	// request's reply subject); the services may be restarting on the
	// edited configuration, so no one may answer for a moment.
	waitFor(t, msg.APIStatus+" answered", func() error {
		resp, err := s.bus.NC.Request(msg.APIStatus, nil, 10*time.Second)
		if err != nil {
			return err
		}
		var rep msg.StatusReport
		return msg.Decode(resp.Data, &rep)
	})

	// weft status as the auditor, who may only read.
	out.Reset()
	errOut.Reset()
	err = run([]string{"status", "--nats-url", srv.URL, "--nats-nkey", natsauth.SeedFile(keys, msg.RoleAuditor)}, &out, &errOut)
	if err != nil || !strings.Contains(out.String(), "quickstart") {
		t.Fatalf("weft status as the auditor: %v\n%s%s", err, out.String(), errOut.String())
	}
	if got := v.String(); got != "" {
		t.Fatalf("the server refused what a service does:\n%s", got)
	}
	if log := srv.LogText(); strings.Contains(log, "Violation") {
		t.Fatalf("the server logged violations:\n%s", log)
	}

	// A user without the right to provision is told so at once.
	out.Reset()
	errOut.Reset()
	err = run([]string{"provision", "--nats-url", srv.URL, "--nats-nkey", natsauth.SeedFile(keys, msg.RoleRenderer), "--timeout", "1m"}, &out, &errOut)
	if !errors.Is(err, natsauth.ErrMayNotProvision) {
		t.Fatalf("weft provision as the renderer: %v, want ErrMayNotProvision\n%s", err, errOut.String())
	}
}

// TestUpRequiresUsers: `weft up --nats-server-config` makes the embedded
// server require the users weft nats-config wrote: weft itself runs on
// the admin's key and delivers, a client without credentials is refused,
// and the auditor reads `weft status`.
func TestUpRequiresUsers(t *testing.T) {
	keys := t.TempDir()
	var conf bytes.Buffer
	if err := run([]string{"nats-config", "--keys", keys}, &conf, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(t.TempDir(), "users.conf")
	if err := os.WriteFile(confFile, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	w := startWeft(t, "up", "--config", filepath.Join(dir, "weft.yaml"), "--nats-listen", addr, "--listen", "127.0.0.1:0",
		"--nats-server-config", confFile, "--nats-nkey", natsauth.SeedFile(keys, msg.RoleAdmin))
	waitFor(t, "first deploy", func() error {
		data, _ := os.ReadFile(filepath.Join(dir, "out", "haproxy.cfg"))
		return contains(string(data), "server web-2 127.0.0.2:8080")
	})
	if nc, err := nats.Connect("nats://"+addr, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected to weft up's server")
	}
	var out, errOut bytes.Buffer
	err = run([]string{"status", "--nats-url", "nats://" + addr, "--nats-nkey", natsauth.SeedFile(keys, msg.RoleAuditor)}, &out, &errOut)
	if err != nil || !strings.Contains(out.String(), "quickstart") {
		t.Fatalf("weft status as the auditor: %v\n%s%s", err, out.String(), errOut.String())
	}
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft exited with %v", err)
	}
}

// usersServer is a real nats-server whose users are what `weft
// nats-config` generates (their seeds in keys), provisioned by `weft
// provision` with the provisioner's key. Every refusal it sends to a
// roleBus of v fails the test when it ends.
func usersServer(t *testing.T) (url, keys string, v *violations) {
	t.Helper()
	keys = t.TempDir()
	var conf bytes.Buffer
	if err := run([]string{"nats-config", "--keys", keys}, &conf, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	srv := testkit.NATSServer(t, conf.String())
	var errOut bytes.Buffer
	if err := run([]string{"provision", "--nats-url", srv.URL, "--nats-nkey", natsauth.SeedFile(keys, msg.RoleProvisioner)}, &bytes.Buffer{}, &errOut); err != nil {
		t.Fatalf("weft provision: %v\n%s", err, errOut.String())
	}
	v = &violations{}
	t.Cleanup(func() {
		if s := v.String(); s != "" {
			t.Errorf("the NATS server refused:\n%s", s)
		}
	})
	return srv.URL, keys, v
}
