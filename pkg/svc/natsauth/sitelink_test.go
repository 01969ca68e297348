package natsauth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/natsauth"
	"github.com/weftio/weft/pkg/testkit"
)

// TestSiteLinkUser runs a hub whose leaf-node port has no authorization
// of its own, so a site's leaf node dials in as the site-link user of the
// hub's authorization block, with its generated permissions, and a site's
// leaf node (domain edge-1) dialing it with that user's nkey: the sources
// of both sides (msg.AtSite, msg.WithSites) carry verdicts, validation
// statuses and bundles to the site and deploy statuses and outcomes to the
// hub; what else a site asks of the hub's JetStream is refused; the user
// cannot connect as a client.
func TestSiteLinkUser(t *testing.T) {
	keys := t.TempDir()
	users, err := natsauth.NKeyUsers(keys, msg.Roles())
	if err != nil {
		t.Fatal(err)
	}
	auth, err := natsauth.AuthorizationConfig(users, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(auth, `permissions: $weft_site_link, allowed_connection_types: ["LEAFNODE"]}`) {
		t.Fatalf("the site link's user is not a leaf-node user:\n%s", auth)
	}
	leafPort := testkit.FreePort(t)
	hub := testkit.NATSServer(t, fmt.Sprintf("jetstream {\n  store_dir: %q\n  domain: hub\n}\nleafnodes {\n  listen: \"127.0.0.1:%d\"\n  no_advertise: true\n}\n%s\n%s",
		t.TempDir(), leafPort, natsauth.PermissionsConfig(), auth))
	seed, err := os.ReadFile(natsauth.SeedFile(keys, msg.RoleSiteLink))
	if err != nil {
		t.Fatal(err)
	}
	deny := `["` + strings.Join(msg.LeafDeny, `", "`) + `"]`
	site := testkit.NATSServer(t, fmt.Sprintf("jetstream {\n  store_dir: %q\n  domain: edge-1\n}\nleafnodes {\n  reconnect: \"500ms\"\n  remotes: [{url: \"nats-leaf://127.0.0.1:%d\", nkey: %q, deny_imports: %s, deny_exports: %s}]\n}\n",
		t.TempDir(), leafPort, strings.TrimSpace(string(seed)), deny, deny))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hubJS := connectAs(t, hub.URL, natsauth.SeedFile(keys, msg.RoleAdmin))
	siteJS := connectAs(t, site.URL, "")
	if err := msg.Provision(ctx, hubJS, 1, msg.WithSites("edge-1")); err != nil {
		t.Fatal(err)
	}
	if err := msg.Provision(ctx, siteJS, 1, msg.AtSite("edge-1", msg.DefaultHubDomain, []string{"edge"})); err != nil {
		t.Fatal(err)
	}
	hubKV, err := hubJS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	siteKV, err := siteJS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	hubBundles, err := hubJS.ObjectStore(ctx, msg.ObjectBundles)
	if err != nil {
		t.Fatal(err)
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(hubKV.Put(ctx, msg.ValidationStatusKey("edge"), []byte("accepted")))
	must(hubJS.Publish(ctx, msg.ValidatedSubject("edge"), []byte("verdict")))
	must(hubBundles.PutBytes(ctx, "bundle-1", []byte("files")))
	must(siteKV.Put(ctx, msg.DeployStatusKey("edge", "lb-1"), []byte("deployed")))
	must(siteJS.Publish(ctx, msg.DeployedSubject("edge", "lb-1"), []byte("outcome")))

	value := func(kv jetstream.KeyValue, key string) (string, error) {
		e, err := kv.Get(ctx, key)
		if err != nil {
			return "", fmt.Errorf("%s: %w", key, err)
		}
		return string(e.Value()), nil
	}
	msgs := func(js jetstream.JetStream, stream string) (uint64, error) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Msgs, nil
	}
	testkit.Eventually(t, time.Minute, func() error {
		if v, err := value(siteKV, msg.ValidationStatusKey("edge")); v != "accepted" {
			return fmt.Errorf("the site's validation status: %q %v", v, err)
		}
		if n, err := msgs(siteJS, msg.StreamValidated); n != 1 {
			return fmt.Errorf("the site's verdicts: %d %v", n, err)
		}
		bundles, err := siteJS.ObjectStore(ctx, msg.ObjectBundles)
		if err != nil {
			return err
		}
		if b, err := bundles.GetBytes(ctx, "bundle-1"); string(b) != "files" {
			return fmt.Errorf("the site's bundle: %q %v", b, err)
		}
		if v, err := value(hubKV, msg.DeployStatusKey("edge", "lb-1")); v != "deployed" {
			return fmt.Errorf("the hub's copy of the site's deploy status: %q %v", v, err)
		}
		if n, err := msgs(hubJS, msg.StreamDeploys); n != 1 {
			return fmt.Errorf("the hub's copy of the site's outcomes: %d %v", n, err)
		}
		return nil
	})

	// Through the link, the site reaches nothing else of the hub's
	// JetStream: neither a stream it does not source nor one it does by
	// another consumer than its filter's.
	hubFromSite, err := jetstream.NewWithDomain(siteJS.Conn(), msg.DefaultHubDomain)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		do   func(ctx context.Context) error
	}{
		{"read the hub's renders stream", func(ctx context.Context) error {
			_, err := hubFromSite.Stream(ctx, msg.StreamRenders)
			return err
		}},
		{"follow every verdict of the hub", func(ctx context.Context) error {
			_, err := hubFromSite.OrderedConsumer(ctx, msg.StreamValidated, jetstream.OrderedConsumerConfig{})
			if err != nil {
				return err
			}
			_, err = hubFromSite.Stream(ctx, msg.StreamValidated)
			return err
		}},
		{"read the hub's resources bucket", func(ctx context.Context) error {
			kv, err := hubFromSite.KeyValue(ctx, msg.BucketResources)
			if err != nil {
				return err
			}
			_, err = kv.Status(ctx)
			return err
		}},
		{"delete the hub's status bucket", func(ctx context.Context) error {
			return hubFromSite.DeleteKeyValue(ctx, msg.BucketStatus)
		}},
	} {
		t.Run("a site may not "+tc.what, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := tc.do(ctx); err == nil {
				t.Fatalf("a site could %s through the link", tc.what)
			}
		})
	}
	if _, err := hubJS.KeyValue(ctx, msg.BucketStatus); err != nil {
		t.Fatalf("the hub's status bucket after the site's attempts: %v", err)
	}

	opts, err := natsauth.Client{NKey: natsauth.SeedFile(keys, msg.RoleSiteLink)}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(hub.URL, append(opts, nats.MaxReconnects(0))...)
	if err == nil {
		nc.Close()
		t.Fatal("the site link's user connects as a client")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("the site link's user as a client: %v, want an authorization violation", err)
	}
}

// connectAs connects to url with the nkey seed in seedFile (none: no
// credentials), closed when the test ends.
func connectAs(t *testing.T, url, seedFile string) jetstream.JetStream {
	t.Helper()
	var opts []nats.Option
	if seedFile != "" {
		o, err := natsauth.Client{NKey: seedFile}.Options()
		if err != nil {
			t.Fatal(err)
		}
		opts = o
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestSiteLinkPermissions checks the site-link role's generated allow
// lists: into the hub (Publish) only the consumer creations of what a site
// sources, with their filters, and the deliveries, replies and flow
// control; nothing of weft's own either way.
func TestSiteLinkPermissions(t *testing.T) {
	a, err := msg.AccessOf(msg.RoleSiteLink)
	if err != nil {
		t.Fatal(err)
	}
	p := a.Permissions()
	flow := []string{"$JS.S.*", "$JSC.R.*", "$JS.FC.>"}
	wantPub := append([]string{
		"$JS.*.API.CONSUMER.CREATE.WEFT_VALIDATED.*.weft.validated.*",
		"$JS.*.API.CONSUMER.CREATE.KV_weft-status.*.$KV.weft-status.validate.*",
		"$JS.*.API.CONSUMER.CREATE.KV_weft-status.*.$KV.weft-status.pin.*",
		"$JS.*.API.CONSUMER.CREATE.OBJ_weft-bundles",
	}, flow...)
	wantSub := append([]string{"$JS.*.API.CONSUMER.>"}, flow...)
	if !slices.Equal(slices.Sorted(slices.Values(p.Publish)), slices.Sorted(slices.Values(wantPub))) {
		t.Errorf("publish (into the hub) %v, want %v", p.Publish, wantPub)
	}
	if !slices.Equal(slices.Sorted(slices.Values(p.Subscribe)), slices.Sorted(slices.Values(wantSub))) {
		t.Errorf("subscribe (from the hub) %v, want %v", p.Subscribe, wantSub)
	}
	if p.Responses != 0 {
		t.Errorf("allow_responses %d: the link answers no request of its own", p.Responses)
	}
}
