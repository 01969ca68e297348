package natsauth_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
)

var update = flag.Bool("update", false, "rewrite deploy/nats/permissions.conf from the access table")

// TestPermissionsFileIsGenerated keeps deploy/nats/permissions.conf equal
// to what the access table generates (go test -update rewrites it).
func TestPermissionsFileIsGenerated(t *testing.T) {
	path := filepath.Join("..", "..", "..", "deploy", "nats", "permissions.conf")
	want := natsauth.PermissionsConfig()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not what the access table generates; run `go run ./cmd/weft nats-config --permissions-only > deploy/nats/permissions.conf` (or go test -update)", path)
	}
}

// refused publishes on subject and waits for the server's permissions
// violation naming it.
func refused(t *testing.T, c *testkit.RoleConn, subject string) {
	t.Helper()
	if err := c.NC.Publish(subject, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	_ = c.NC.Flush()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-c.Errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
		case <-deadline:
			t.Fatalf("publishing on %s was not refused", subject)
		}
	}
}

// published publishes on subject through JetStream: the stream's
// acknowledgement proves the publish and the reply were allowed.
func published(t *testing.T, c *testkit.RoleConn, subject string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.JS.Publish(ctx, subject, []byte("{}")); err != nil {
		t.Fatalf("publishing on %s: %v", subject, err)
	}
}

// TestRolePermissions: on a real nats-server with the generated users,
// each role may publish what it does and is refused what it does not: no
// one but the renderer publishes a render, the watcher publishes no deploy
// order and writes no other service's status, the renderer writes no
// watched object, the auditor publishes nothing but reads everything.
func TestRolePermissions(t *testing.T) {
	s := testkit.NATSWithUsers(t, "")
	admin := s.Connect(t, msg.RoleAdmin)
	// The provisioner provisions; a service user cannot.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := msg.Provision(ctx, s.Connect(t, msg.RoleProvisioner).JS, 1); err != nil {
		t.Fatalf("the provisioner provisions: %v", err)
	}
	refused(t, s.Connect(t, msg.RoleRenderer), "$JS.API.STREAM.CREATE."+msg.StreamRenders)
	refused(t, s.Connect(t, msg.RoleRenderer), "$JS.API.STREAM.DELETE."+msg.StreamRenders)

	refusals := []struct {
		role    msg.Role
		subject string
	}{
		// The forged render: only the renderer publishes renders.
		{msg.RoleDeployer, msg.RenderSubject("edge")},
		{msg.RoleValidator, msg.RenderSubject("edge")},
		{msg.RoleWatcher, msg.RenderSubject("edge")},
		{msg.RolePullerAgent, msg.RenderSubject("edge")},
		// Nor does anyone else write the renderer's status or lease.
		{msg.RoleDeployer, msg.StatusSubject(msg.RenderStatusKey("edge"))},
		{msg.RoleValidator, msg.LeaseSubject(msg.RenderLeaseKey("edge"))},
		// The watcher: no deploy order, no status but its sync markers.
		{msg.RoleWatcher, msg.DeploySubject("edge", "main")},
		{msg.RoleWatcher, msg.StatusSubject(msg.DeployStatusKey("edge", "main"))},
		{msg.RoleWatcher, msg.StatusSubject(msg.RenderStatusKey("edge"))},
		{msg.RoleWatcher, msg.StatusSubject(msg.ValidationStatusKey("edge"))},
		{msg.RoleWatcher, msg.ValidatedSubject("edge")},
		{msg.RoleWatcher, msg.LeaseSubject(msg.RenderLeaseKey("edge"))},
		{msg.RoleRenderer, msg.LeaseSubject(msg.IngressStatusLeaseKey("edge"))},
		// The renderer writes no watched object and no verdict.
		{msg.RoleRenderer, msg.ResourceSubject(msg.ResourceKey("src", "pods", "ns", "p"))},
		{msg.RoleRenderer, msg.ValidatedSubject("edge")},
		{msg.RoleRenderer, msg.DeploySubject("edge", "main")},
		// The validator orders no deploy; the deployer forges no verdict.
		{msg.RoleValidator, msg.DeploySubject("edge", "main")},
		{msg.RoleDeployer, msg.ValidatedSubject("edge")},
		{msg.RoleDeployer, msg.ResourceSubject(msg.ResourceKey("src", "pods", "ns", "p"))},
		// A node agent orders no pull and writes no deploy status.
		{msg.RolePullerAgent, msg.PullSubject("n1")},
		{msg.RolePullerAgent, msg.StatusSubject(msg.DeployStatusKey("edge", "main"))},
		// Answers go only to requests received: no inbox is forged into.
		{msg.RoleValidator, "_INBOX.forged.reply"},
		{msg.RoleDeployer, "_INBOX.forged.reply"},
		// The auditor publishes nothing.
		{msg.RoleAuditor, msg.RenderSubject("edge")},
		{msg.RoleAuditor, msg.ChangeSubject("src", "pods")},
		{msg.RoleAuditor, msg.TriggerDeploySubject("edge")},
		{msg.RoleAuditor, msg.APIStatus},
		{msg.RoleAuditor, msg.StatusSubject(msg.SyncStatusKey("src", "pods"))},
		{msg.RoleAuditor, "$O." + msg.ObjectBundles + ".M.x"},
		{msg.RoleAuditor, "$JS.API.STREAM.PURGE." + msg.StreamRenders},
		// The auditor asks history and diffs, never a rollback or unpin;
		// only the deployer writes pins and the history.
		{msg.RoleAuditor, msg.APIRollbackSubject("edge")},
		{msg.RoleAuditor, msg.APIUnpinSubject("edge")},
		{msg.RoleAuditor, msg.StatusSubject(msg.PinKey("edge"))},
		{msg.RoleOperator, msg.StatusSubject(msg.PinKey("edge"))},
		{msg.RoleOperator, msg.DeploySubject("edge", "main")},
		{msg.RoleValidator, msg.StatusSubject(msg.PinKey("edge"))},
		{msg.RoleRenderer, "$KV." + msg.BucketHistory + "." + msg.HistoryKey("edge", 1)},
	}
	for _, r := range refusals {
		t.Run(string(r.role)+" refused "+r.subject, func(t *testing.T) {
			refused(t, s.Connect(t, r.role), r.subject)
		})
	}

	allowed := []struct {
		role    msg.Role
		subject string
	}{
		{msg.RoleRenderer, msg.RenderSubject("edge")},
		{msg.RoleRenderer, msg.StatusSubject(msg.RenderStatusKey("edge"))},
		{msg.RoleWatcher, msg.ResourceSubject(msg.ResourceKey("src", "pods", "ns", "p"))},
		{msg.RoleWatcher, msg.StatusSubject(msg.SyncStatusKey("src", "pods"))},
		{msg.RoleWatcher, msg.LeaseSubject(msg.IngressStatusLeaseKey("edge"))},
		{msg.RoleValidator, msg.ValidatedSubject("edge")},
		{msg.RoleDeployer, msg.DeploySubject("edge", "main")},
		{msg.RoleDeployer, msg.StatusSubject(msg.DeployStatusKey("edge", "main"))},
		{msg.RolePullerAgent, msg.PulledSubject("n1")},
		{msg.RolePullerController, msg.PullSubject("n1")},
		{msg.RoleDeployer, msg.StatusSubject(msg.PinKey("edge"))},
		{msg.RoleDeployer, "$KV." + msg.BucketHistory + "." + msg.HistoryKey("edge", 1)},
	}
	for _, a := range allowed {
		t.Run(string(a.role)+" publishes "+a.subject, func(t *testing.T) {
			published(t, s.Connect(t, a.role), a.subject)
		})
	}

	t.Run("the auditor asks history and diffs, the operator also rolls back", func(t *testing.T) {
		// The deployer answers the API; here the admin stands in for it.
		sub, err := admin.NC.Subscribe(msg.APIAll, func(m *nats.Msg) { _ = m.Respond([]byte("answered")) })
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := admin.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		asks := []struct {
			role    msg.Role
			subject string
		}{
			{msg.RoleAuditor, msg.APIHistorySubject("edge")},
			{msg.RoleAuditor, msg.APIDiffSubject("edge")},
			{msg.RoleOperator, msg.APIHistorySubject("edge")},
			{msg.RoleOperator, msg.APIRollbackSubject("edge")},
			{msg.RoleOperator, msg.APIUnpinSubject("edge")},
			{msg.RoleOperator, msg.APIStatus},
		}
		for _, a := range asks {
			rep, err := s.Connect(t, a.role).NC.Request(a.subject, nil, 10*time.Second)
			if err != nil || string(rep.Data) != "answered" {
				t.Errorf("%s asks %s: %v", a.role, a.subject, err)
			}
		}
	})

	t.Run("the auditor sees every message and reads the status bucket", func(t *testing.T) {
		aud := s.Connect(t, msg.RoleAuditor)
		sub, err := aud.NC.SubscribeSync(msg.AllSubjects)
		if err != nil {
			t.Fatal(err)
		}
		if err := aud.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		published(t, s.Connect(t, msg.RoleRenderer), msg.RenderSubject("seen"))
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the auditor got nothing on %s: %v", msg.AllSubjects, err)
		}
		if m.Subject != msg.RenderSubject("seen") {
			t.Fatalf("the auditor got %s", m.Subject)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv, err := aud.JS.KeyValue(ctx, msg.BucketStatus)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, msg.RenderStatusKey("edge")); err != nil {
			t.Fatalf("the auditor reads %s: %v", msg.RenderStatusKey("edge"), err)
		}
		keys, err := kv.Keys(ctx)
		if err != nil || len(keys) == 0 {
			t.Fatalf("the auditor lists the status keys: %v %v", keys, err)
		}
		// Its write is refused: the value stays the renderer's.
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		if _, err := kv.Put(pctx, msg.RenderStatusKey("edge"), []byte("forged")); err == nil {
			t.Fatal("the auditor wrote the status bucket")
		}
		e, err := getStatus(ctx, admin, msg.RenderStatusKey("edge"))
		if err != nil || string(e) != "{}" {
			t.Fatalf("status %s after the auditor's write: %q %v", msg.RenderStatusKey("edge"), e, err)
		}
	})
}

func getStatus(ctx context.Context, c *testkit.RoleConn, key string) ([]byte, error) {
	kv, err := c.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// TestServerConfigOfSomeRoles: a configuration with users of some roles
// only (weft nats-config --roles) defines only their permission
// variables, since nats-server refuses one defined and never used; the
// authorization block, which follows the whole permissions file, wants a
// user of every role.
func TestServerConfigOfSomeRoles(t *testing.T) {
	users, err := natsauth.NKeyUsers(t.TempDir(), []msg.Role{msg.RoleRenderer, msg.RoleAuditor})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := natsauth.ServerConfig(users)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(conf, natsauth.PermissionsVar(msg.RoleWatcher)) {
		t.Fatalf("the configuration of the renderer and the auditor defines the watcher's permissions:\n%s", conf)
	}
	testkit.NATSServer(t, conf) // fails the test when the server refuses it
	if _, err := natsauth.AuthorizationConfig(users, ""); !errors.Is(err, natsauth.ErrRoleWithoutUser) {
		t.Fatalf("an authorization block of two roles: %v, want ErrRoleWithoutUser", err)
	}
}
