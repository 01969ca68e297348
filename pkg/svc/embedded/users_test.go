package embedded_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/embedded"
	"github.com/weftio/weft/pkg/svc/natsauth"
)

// TestStartRequiringUsers: with the users weft nats-config writes, the
// embedded server refuses a client without credentials, keeps its own
// address, and lets the admin provision.
func TestStartRequiringUsers(t *testing.T) {
	keys := t.TempDir()
	users, err := natsauth.NKeyUsers(keys, msg.Roles())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := natsauth.ServerConfig(users)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := embedded.Start(embedded.Options{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir(), ConfigFile: path})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected")
	}
	opts, err := natsauth.Client{NKey: natsauth.SeedFile(keys, msg.RoleAdmin)}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("the admin connects: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := msg.Provision(ctx, js, 1); err != nil {
		t.Fatalf("the admin provisions: %v", err)
	}
}
