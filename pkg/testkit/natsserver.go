package testkit

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
)

// NATSProcess is one nats-server process (NATSServerBinary) on 127.0.0.1
// with JetStream, started by NATSServer.
type NATSProcess struct {
	URL     string // nats://127.0.0.1:<port>
	Log     string // the server's log file
	Conf    string // the configuration file it runs
	Port    int
	monPort int
}

// NATSServer starts one nats-server with JetStream in a temporary folder,
// its configuration being the listen address, the monitoring port and the
// JetStream store followed by conf (accounts, users, tls...), and waits
// until /healthz answers. The process is killed when the test ends; when
// the test failed, the last lines of its log are shown.
func NATSServer(t testing.TB, conf string) *NATSProcess {
	t.Helper()
	bin := NATSServerBinary(t)
	dir := t.TempDir()
	p := &NATSProcess{Log: filepath.Join(dir, "nats-server.log"), Conf: filepath.Join(dir, "nats-server.conf")}
	var err error
	for _, port := range []*int{&p.Port, &p.monPort} {
		if *port, err = freePort(); err != nil {
			t.Fatal(err)
		}
	}
	p.URL = fmt.Sprintf("nats://127.0.0.1:%d", p.Port)
	full := fmt.Sprintf("listen: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\njetstream {\n  store_dir: %q\n}\n\n%s", p.Port, p.monPort, filepath.Join(dir, "store"), conf)
	if err := os.WriteFile(p.Conf, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(bin, "-c", p.Conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("last lines of nats-server (%s):\n%s", p.Log, Tail(p.Log, 40))
		}
	})
	client := &http.Client{Timeout: 2 * time.Second}
	health := fmt.Sprintf("http://127.0.0.1:%d/healthz", p.monPort)
	deadline := time.Now().Add(time.Minute)
	for {
		err := Healthy(client, health)
		if err == nil {
			return p
		}
		select {
		case <-done:
			t.Fatalf("nats-server exited while starting; last lines of %s:\n%s", p.Log, Tail(p.Log, 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server not ready within a minute: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LogText is the server's log so far.
func (p *NATSProcess) LogText() string {
	data, _ := os.ReadFile(p.Log)
	return string(data)
}

// NATSUsers is a nats-server (NATSServer) with the users `weft
// nats-config` generates: one nkey user per role of msg.Roles, each
// allowed what its row of msg.Accesses says and refused the rest.
type NATSUsers struct {
	*NATSProcess
	// Keys is the folder of the users' seeds (natsauth.SeedFile).
	Keys string
}

// NATSWithUsers starts a NATSUsers; extra is added to the server's
// configuration (tls, ...).
func NATSWithUsers(t testing.TB, extra string) *NATSUsers {
	t.Helper()
	keys := t.TempDir()
	users, err := natsauth.NKeyUsers(keys, msg.Roles())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := natsauth.ServerConfig(users)
	if err != nil {
		t.Fatal(err)
	}
	return &NATSUsers{NATSProcess: NATSServer(t, conf+extra), Keys: keys}
}

// RoleConn is a connection of one role, and the errors the server sent it
// (a refused publish or subscription arrives this way).
type RoleConn struct {
	*Bus
	Errs chan error
}

// Connect connects as role, with more options; it is closed when the
// test ends.
func (u *NATSUsers) Connect(t testing.TB, role msg.Role, more ...nats.Option) *RoleConn {
	t.Helper()
	opts, err := natsauth.Client{NKey: natsauth.SeedFile(u.Keys, role)}.Options()
	if err != nil {
		t.Fatal(err)
	}
	c := &RoleConn{Errs: make(chan error, 100)}
	opts = append(opts, nats.Name("weft "+string(role)), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case c.Errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(u.URL, append(opts, more...)...)
	if err != nil {
		t.Fatalf("%s connects: %v", role, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.Bus = &Bus{NC: nc, JS: js, URL: u.URL}
	return c
}
