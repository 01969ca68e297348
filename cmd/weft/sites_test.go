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
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/testkit"
)

// siteConfig has one target delivered at the hub (shop) and one at the
// site edge-1 (edge), both rendering the value greeting.
const siteConfig = `sources:
  - {name: values, type: file, path: values.yaml}
sites: [edge-1]
targets:
  shop:
    validate: {kinds: [template]}
    render: {debounce: 20ms}
    deploy: {driver: files, dest: %[1]s}
    haproxy_config: {template: "# shop {{ values.get('/greeting', 'none') }}\n"}
  edge:
    validate: {kinds: [template]}
    render: {debounce: 20ms}
    deploy: {driver: files, dest: %[2]s, site: edge-1}
    maps:
      hosts.map: {template: "{{ values.get('/greeting', 'none') }}.example.com be\n"}
    haproxy_config: {template: "# edge {{ values.get('/greeting', 'none') }}\n"}
`

// TestSiteOverLeafNode runs weft at a hub (nats-server, JetStream domain
// hub) and the deployer of site edge-1 on a leaf node (domain edge-1)
// whose link to the hub goes through a proxy the test cuts and restores:
// the site follows the hub, keeps its last bundle while cut off, and
// catches up in order once the link is back, each bundle deployed at most
// once; the hub's weft status names the site's instance and shows the
// site unreachable while cut off.
func TestSiteOverLeafNode(t *testing.T) {
	leafPort := freeTCPPort(t)
	hub := testkit.NATSServer(t, fmt.Sprintf("jetstream {\n  store_dir: %q\n  domain: hub\n}\nleafnodes {\n  listen: \"127.0.0.1:%d\"\n  no_advertise: true\n}\n", t.TempDir(), leafPort))
	link := testkit.Proxy(t, fmt.Sprintf("127.0.0.1:%d", leafPort))
	deny := `["` + strings.Join(msg.LeafDeny, `", "`) + `"]`
	site := testkit.NATSServer(t, fmt.Sprintf("jetstream {\n  store_dir: %q\n  domain: edge-1\n}\nleafnodes {\n  reconnect: \"500ms\"\n  remotes: [{url: \"nats-leaf://%s\", deny_imports: %s, deny_exports: %s}]\n}\n", t.TempDir(), link.Addr, deny, deny))

	dir := t.TempDir()
	hubOut, siteOut := filepath.Join(dir, "hub-out"), filepath.Join(dir, "site-out")
	writeFile(t, filepath.Join(dir, "weft.yaml"), fmt.Sprintf(siteConfig, hubOut, siteOut))
	setGreeting := func(g string) { writeFile(t, filepath.Join(dir, "values.yaml"), "greeting: "+g+"\n") }
	setGreeting("g1")

	runAt := func(url, siteName string, services []host.Service) {
		var set host.Settings
		fs := flag.NewFlagSet("weft", flag.ContinueOnError)
		set.Flags(fs, false)
		set.SiteFlag(fs)
		if err := fs.Parse([]string{"--config", filepath.Join(dir, "weft.yaml"), "--nats-url", url, "--site", siteName,
			"--listen", "127.0.0.1:0", "--log-level", "warn", "--watch-config=false"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(testkit.Run(t, func(ctx context.Context) error {
			return host.Run(ctx, set, host.Binary{Name: "weft up", Services: services, Reload: make(chan os.Signal)})
		}))
	}
	runAt(hub.URL, "", Services)
	runAt(site.URL, "edge-1", SiteServices)

	read := func(path string) string {
		data, _ := os.ReadFile(path)
		return string(data)
	}
	siteHas := func(g string) error {
		if err := contains(read(filepath.Join(siteOut, "haproxy.cfg")), "# edge "+g+"\n"); err != nil {
			return err
		}
		return contains(read(filepath.Join(siteOut, "maps", "hosts.map")), g+".example.com be\n")
	}
	waitFor(t, "the hub's target deployed at the hub", func() error { return contains(read(filepath.Join(hubOut, "haproxy.cfg")), "# shop g1") })
	waitAtLeast(t, "the site's target deployed at the site", func() error { return siteHas("g1") })
	if _, err := os.Stat(filepath.Join(hubOut, "maps")); err == nil {
		t.Error("the hub delivered the site's target too")
	}
	setGreeting("g2")
	waitAtLeast(t, "the second bundle at the site", func() error { return siteHas("g2") })
	waitAtLeast(t, "the hub's status names the site's instance", func() error {
		out, err := hubStatus(hub.URL)
		if err != nil {
			return err
		}
		if err := contains(out, "edge-1/local"); err != nil {
			return err
		}
		return matches(out, `(?m)^edge-1 +edge/local +\d+ +ok$`)
	})

	// The hub's deployer leaves the site's target to the site.
	hubNC, hubJS := connect(t, hub.URL)
	defer hubNC.Close()
	reply, err := hubNC.Request(msg.TriggerDeploySubject("edge"), nil, 10*time.Second)
	if err != nil || !strings.Contains(string(reply.Data), `target "edge" is delivered by the deployer of site edge-1`) {
		t.Fatalf("trigger of the site's target at the hub: %v %v", reply, err)
	}

	// Cut the link: the hub goes on accepting bundles, the site keeps its
	// last one.
	link.Cut()
	for _, g := range []string{"g3", "g4", "g5"} {
		setGreeting(g)
		waitFor(t, "the hub follows "+g, func() error { return contains(read(filepath.Join(hubOut, "haproxy.cfg")), "# shop "+g) })
	}
	var last msg.ValidationStatus
	waitFor(t, "the hub accepts the last bundle of the site's target", func() error {
		kv, err := hubJS.KeyValue(context.Background(), msg.BucketStatus)
		if err != nil {
			return err
		}
		if _, err := msg.LoadStatus(context.Background(), kv, msg.ValidationStatusKey("edge"), &last); err != nil {
			return err
		}
		if !last.OK || last.Version < 5 {
			return fmt.Errorf("validation status %+v", last)
		}
		return nil
	})
	waitAtLeast(t, "the hub shows the site unreachable", func() error {
		out, err := hubStatus(hub.URL)
		if ee, ok := errors.AsType[*exitError](err); !ok || ee.code != ExitFailing {
			return fmt.Errorf("weft status: %v, want exit %d (a site unreachable):\n%s", err, ExitFailing, out)
		}
		return matches(out, `(?m)^edge-1 +edge/local +\d+ +site unreachable since \S+ \(\S+\)(: .*)?$`)
	})
	if err := siteHas("g2"); err != nil {
		t.Fatalf("the site lost its last bundle while cut off: %v", err)
	}
	resp, err := hubNC.Request(msg.APIStatus, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep msg.StatusReport
	if err := msg.Decode(resp.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Sites) != 1 || rep.Sites[0].Site != "edge-1" || rep.Sites[0].Reachable {
		t.Errorf("%s at the hub names the sites %+v, want edge-1 unreachable", msg.APIStatus, rep.Sites)
	}
	// The site's deployer works on its own JetStream meanwhile: a file
	// removed behind its back is delivered again on a trigger, from the
	// last bundle the site has.
	siteNC, siteJS := connect(t, site.URL)
	defer siteNC.Close()
	beforeCut := deployedVersions(t, siteJS, "edge")
	if err := os.Remove(filepath.Join(siteOut, "maps", "hosts.map")); err != nil {
		t.Fatal(err)
	}
	reply, err = siteNC.Request(msg.TriggerDeploySubject("edge"), nil, 10*time.Second)
	if err != nil || string(reply.Data) != "queued" {
		t.Fatalf("trigger at the site: %v %v", reply, err)
	}
	waitFor(t, "the site repairs its files while cut off", func() error { return siteHas("g2") })

	// Restore: the site catches up with the hub's last accepted bundle.
	link.Restore()
	waitAtLeast(t, "the site catches up", func() error { return siteHas("g5") })
	waitAtLeast(t, "the hub's status shows the site's instance on the last bundle", func() error {
		out, err := hubStatus(hub.URL)
		if err != nil {
			return fmt.Errorf("%v:\n%s", err, out)
		}
		return contains(out, fmt.Sprintf("edge-1/local  v%d %s", last.Version, last.LastGood[:12]))
	})

	// Every outcome at the site: each bundle applied at most once, never
	// an older one after a newer one; the hub has them too.
	// The outcomes before the cut, the repair of the last of them, then
	// only newer bundles, each once, the last being the hub's.
	applied := deployedVersions(t, siteJS, "edge")
	if len(beforeCut) < 2 || len(applied) < len(beforeCut)+2 || fmt.Sprint(applied[:len(beforeCut)+1]) != fmt.Sprint(append(beforeCut, beforeCut[len(beforeCut)-1])) {
		t.Fatalf("versions applied at the site %v, want those before the cut %v, the repair of the last, then the newer ones", applied, beforeCut)
	}
	if applied[len(applied)-1] != last.Version {
		t.Fatalf("versions applied at the site %v end before the hub's last accepted v%d", applied, last.Version)
	}
	for _, vs := range [][]uint64{beforeCut, applied[len(beforeCut):]} {
		for i := 1; i < len(vs); i++ {
			if vs[i] <= vs[i-1] {
				t.Fatalf("versions applied at the site %v: v%d after v%d", applied, vs[i], vs[i-1])
			}
		}
	}
	// Nothing dead-lettered but the trigger of the site's target at the hub.
	for where, want := range map[string]uint64{"hub": 1, "site": 0} {
		js := map[string]jetstream.JetStream{"hub": hubJS, "site": siteJS}[where]
		if n := streamMsgs(t, js, msg.StreamDLQ); n != want {
			t.Errorf("%d messages dead-lettered at the %s, want %d", n, where, want)
		}
	}
	// Acknowledgements stay on their side of the link: the deployer's
	// consumer of verdicts has one name at the hub and at the site.
	for where, p := range map[string]*testkit.NATSProcess{"hub": hub, "site": site} {
		if strings.Contains(p.LogText(), "past last stream sequence") {
			t.Errorf("a consumer at the %s took acknowledgements from the other side of the link", where)
		}
	}
	waitAtLeast(t, "the site's outcomes at the hub", func() error {
		if got := deployedVersions(t, hubJS, "edge"); fmt.Sprint(got) != fmt.Sprint(applied) {
			return fmt.Errorf("the hub has %v, the site %v", got, applied)
		}
		return nil
	})
}

// waitAtLeast is waitFor with room for a leaf link to come back (it is
// dialled again every 500ms) and sourcing to resume.
func waitAtLeast(t testing.TB, what string, f func() error) {
	t.Helper()
	testkit.Eventually(t, time.Minute, func() error {
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// deployedVersions are the versions of the applied outcomes of target's
// instance local, in stream order; a failed outcome fails the test (at a
// site, a bundle arriving after the verdict that names it is waited for).
func deployedVersions(t *testing.T, js jetstream.JetStream, target string) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, msg.StreamDeploys, jetstream.OrderedConsumerConfig{FilterSubjects: []string{msg.DeployedSubject(target, "local")}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for n := info.NumPending; n > 0; n-- {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var d msg.Deployed
		if err := msg.Decode(m.Data(), &d); err != nil {
			t.Fatal(err)
		}
		switch d.Outcome {
		case msg.OutcomeApplied:
			out = append(out, d.Version)
		case msg.OutcomeFailed:
			t.Errorf("deploy of %s v%d failed: %s", target, d.Version, d.Error)
		}
	}
	return out
}

func matches(text, re string) error {
	if !regexp.MustCompile(re).MatchString(text) {
		return fmt.Errorf("no line matches %s in:\n%s", re, text)
	}
	return nil
}

func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func hubStatus(url string) (string, error) {
	var stdout, stderr bytes.Buffer
	err := run([]string{"status", "--nats-url", url}, &stdout, &stderr)
	return stdout.String() + stderr.String(), err
}

func connect(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestUpSiteSettings: weft up --site needs a site of weft.yaml's sites and
// a NATS server (the leaf node), and does not go with --demo.
func TestUpSiteSettings(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "weft.yaml"), fmt.Sprintf(siteConfig, filepath.Join(dir, "a"), filepath.Join(dir, "b")))
	writeFile(t, filepath.Join(dir, "values.yaml"), "greeting: g1\n")
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--site", "edge-9"}, `site "edge-9" is not one of weft.yaml's sites (edge-1)`, ExitFailed},
		{[]string{"--site", "edge-1", "--demo"}, "--demo and --site do not go together", ExitUsage},
		{[]string{"--site", "edge-1", "--nats-url", ""}, "--site needs --nats-url", ExitUsage},
	} {
		var stdout, stderr bytes.Buffer
		err := run(append([]string{"up", "--config", filepath.Join(dir, "weft.yaml"), "--nats-url", "nats://127.0.0.1:1", "--listen", "127.0.0.1:0"}, tc.args...), &stdout, &stderr)
		code, _ := exitCode(err)
		if err == nil || !strings.Contains(err.Error(), tc.want) || code != tc.code {
			t.Errorf("weft up %v: %v (exit %d), want exit %d and %q", tc.args, err, code, tc.code, tc.want)
		}
	}
}

// TestSiteAddedToARunningHub: a site added to weft.yaml while the hub runs
// has its statuses sourced at once (the services provision again on the
// new configuration), and weft status shows it.
func TestSiteAddedToARunningHub(t *testing.T) {
	hub := testkit.NATSServer(t, fmt.Sprintf("jetstream {\n  store_dir: %q\n  domain: hub\n}\n", t.TempDir()))
	dir := t.TempDir()
	cfg := fmt.Sprintf(siteConfig, filepath.Join(dir, "hub-out"), filepath.Join(dir, "site-out"))
	hubOnly := strings.Replace(strings.Replace(cfg, "sites: [edge-1]\n", "", 1), ", site: edge-1}", "}", 1)
	writeFile(t, filepath.Join(dir, "weft.yaml"), hubOnly)
	writeFile(t, filepath.Join(dir, "values.yaml"), "greeting: g1\n")
	var set host.Settings
	fs := flag.NewFlagSet("weft", flag.ContinueOnError)
	set.Flags(fs, false)
	if err := fs.Parse([]string{"--config", filepath.Join(dir, "weft.yaml"), "--nats-url", hub.URL, "--listen", "127.0.0.1:0", "--log-level", "warn"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testkit.Run(t, func(ctx context.Context) error {
		return host.Run(ctx, set, host.Binary{Name: "weft up", Services: Services, Reload: make(chan os.Signal)})
	}))
	nc, js := connect(t, hub.URL)
	defer nc.Close()
	waitFor(t, "the hub's first deploy", func() error {
		data, _ := os.ReadFile(filepath.Join(dir, "site-out", "maps", "hosts.map")) // edge, at the hub for now
		return contains(string(data), "g1.example.com")
	})
	if sites, err := msg.ReadSites(context.Background(), js, time.Now()); err != nil || len(sites) != 0 {
		t.Fatalf("sites of a hub without sites: %v, %v", sites, err)
	}
	writeFile(t, filepath.Join(dir, "weft.yaml"), cfg)
	waitAtLeast(t, "the new site's statuses sourced", func() error {
		sites, err := msg.ReadSites(context.Background(), js, time.Now())
		if err != nil {
			return err
		}
		if len(sites) != 1 || sites[0].Site != "edge-1" {
			return fmt.Errorf("sites %+v", sites)
		}
		return nil
	})
	out, _ := hubStatus(hub.URL)
	if err := matches(out, `(?m)^edge-1 +- +0 +site unreachable: not heard from since the hub's NATS started`); err != nil {
		t.Error(err)
	}
}
