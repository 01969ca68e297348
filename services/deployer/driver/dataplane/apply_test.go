package dataplane_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/weftio/weft/services/deployer/driver/dataplane"
	"github.com/weftio/weft/services/deployer/driver/dataplane/dataplanetest"
)

func base() site {
	return site{
		servers: []string{"SRV_1 10.0.0.1:80", "SRV_2 127.0.0.1:1 disabled"},
		hostMap: "a.example.com be_app\nb.example.com be_app\n",
		errPage: "HTTP/1.0 503 Service Unavailable\r\n\r\ndown\n",
	}
}

// TestApply delivers a first bundle, then a second one, and checks how the
// second one reached HAProxy: through which endpoints, with how many
// reloads.
func TestApply(t *testing.T) {
	cert1, cert2 := selfSigned(t, "a.example.com"), selfSigned(t, "a.example.com")
	tests := []struct {
		name   string
		from   func() site
		change func(*site)
		// reloads and runtime calls the second Apply costs.
		reloads, serverCalls, mapCalls, certCalls int
		check                                     func(t *testing.T, s *dataplanetest.Server)
	}{
		{
			name: "endpoint change", from: base,
			change: func(c *site) {
				c.servers = []string{"SRV_1 10.0.0.2:8080 weight 5", "SRV_2 10.0.0.3:80"}
			},
			serverCalls: 2,
			check: func(t *testing.T, s *dataplanetest.Server) {
				wantServer(t, s, "SRV_1", dataplanetest.RuntimeServer{Address: "10.0.0.2", Port: 8080, Weight: 5, AdminState: "ready"})
				wantServer(t, s, "SRV_2", dataplanetest.RuntimeServer{Address: "10.0.0.3", Port: 80, Weight: 1, AdminState: "ready"})
			},
		},
		{
			name: "server to maintenance", from: base,
			change:      func(c *site) { c.servers[0] += " disabled" },
			serverCalls: 1,
			check: func(t *testing.T, s *dataplanetest.Server) {
				wantServer(t, s, "SRV_1", dataplanetest.RuntimeServer{Address: "10.0.0.1", Port: 80, Weight: 1, AdminState: "maint"})
			},
		},
		{
			name: "map entry change", from: base,
			change:   func(c *site) { c.hostMap = "a.example.com be_other\nc.example.com be_app\n" },
			mapCalls: 3,
			check: func(t *testing.T, s *dataplanetest.Server) {
				wantEntries(t, s, "host.map", "a.example.com=be_other c.example.com=be_app")
			},
		},
		{
			name: "new backend", from: base,
			change:  func(c *site) { c.backends = []string{"be_new"} },
			reloads: 1,
		},
		{
			name: "new backend and endpoint change", from: base,
			change: func(c *site) {
				c.backends = []string{"be_new"}
				c.servers[0] = "SRV_1 10.0.0.9:80"
			},
			reloads: 1,
			check: func(t *testing.T, s *dataplanetest.Server) {
				wantServer(t, s, "SRV_1", dataplanetest.RuntimeServer{Address: "10.0.0.9", Port: 80, Weight: 1, AdminState: "ready"})
			},
		},
		{
			name: "server address becomes a name", from: base,
			change:  func(c *site) { c.servers[0] = "SRV_1 localhost:80" },
			reloads: 1,
		},
		{
			name: "error page changed", from: base,
			change:  func(c *site) { c.errPage = "HTTP/1.0 503 Service Unavailable\r\n\r\nstill down\n" },
			reloads: 1,
		},
		{
			name: "ordered map reordered", from: func() site { c := base(); c.regMap = "^/a a\n^/b b\n"; return c },
			change:  func(c *site) { c.regMap = "^/b b\n^/a a\n" },
			reloads: 1,
		},
		{
			name: "ordered map appended", from: func() site { c := base(); c.regMap = "^/a a\n"; return c },
			change:   func(c *site) { c.regMap = "^/a a\n^/b b\n" },
			mapCalls: 1,
			check: func(t *testing.T, s *dataplanetest.Server) {
				wantEntries(t, s, "paths.map", "^/a=a ^/b=b")
			},
		},
		{
			name: "certificate renewed", from: func() site { c := base(); c.cert = cert1; return c },
			change:    func(c *site) { c.cert = cert2 },
			certCalls: 1,
			check: func(t *testing.T, s *dataplanetest.Server) {
				got, _ := s.RuntimeCert(s.Dir() + "/certs/site.pem")
				if string(got) != string(cert2) {
					t.Error("HAProxy does not run the new certificate")
				}
			},
		},
		{
			name: "map and error page leave the bundle", from: base,
			change: func(c *site) {
				c.errPage = ""
			},
			reloads: 1,
			check: func(t *testing.T, s *dataplanetest.Server) {
				if _, ok := s.StorageFile(dataplanetest.GeneralDir, "503.http"); ok {
					t.Error("files/503.http is still stored")
				}
			},
		},
		{
			name: "nothing changed", from: base,
			change: func(*site) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s := newDouble(t)
			d := newDriver(t, s, nil)
			from := tt.from()
			if _, err := d.Apply(ctx, from.bundle(s.Dir())); err != nil {
				t.Fatalf("first apply: %v", err)
			}
			before := s.Counts()
			to := tt.from()
			tt.change(&to)
			bundle := to.bundle(s.Dir())
			res, err := d.Apply(ctx, bundle)
			if err != nil {
				t.Fatalf("second apply: %v (%+v)", err, res)
			}
			after := s.Counts()
			got := [4]int{after.Reloads - before.Reloads, after.RuntimeServerCalls - before.RuntimeServerCalls,
				after.RuntimeMapCalls - before.RuntimeMapCalls, after.RuntimeCertCalls - before.RuntimeCertCalls}
			if want := [4]int{tt.reloads, tt.serverCalls, tt.mapCalls, tt.certCalls}; got != want {
				t.Errorf("reloads, server, map and certificate calls: got %v, want %v", got, want)
			}
			if res.Reloaded != (tt.reloads > 0) {
				t.Errorf("Reloaded = %v", res.Reloaded)
			}
			wantStored(t, s, bundle)
			golden(t, "apply-"+strings.ReplaceAll(tt.name, " ", "-"), summary(res))
			if tt.check != nil {
				tt.check(t, s)
			}
			// The same bundle again changes nothing.
			before = s.Counts()
			res, err = d.Apply(ctx, bundle)
			if err != nil || len(res.Written)+len(res.Removed)+len(res.RuntimeOps) > 0 || res.Reloaded {
				t.Errorf("apply again: %v, %+v", err, res)
			}
			if after := s.Counts(); after != before {
				t.Errorf("apply again changed something: %+v, then %+v", before, after)
			}
		})
	}
}

// wantStored checks that the API stores exactly the bundle.
func wantStored(t *testing.T, s *dataplanetest.Server, bundle []dataplane.File) {
	t.Helper()
	cfg, _ := s.Config()
	want := map[string]int{}
	for _, f := range bundle {
		if f.Path == "haproxy.cfg" {
			// The API stores its parser's rewrite of the posted text.
			if want, err := dataplanetest.Normalize(string(f.Content)); err != nil || cfg != want {
				t.Errorf("stored configuration differs from the bundle (%v):\n%s", err, cfg)
			}
			continue
		}
		folder, name, _ := strings.Cut(f.Path, "/")
		want[folder]++
		got, ok := s.StorageFile(folder, name)
		if !ok || string(got) != string(f.Content) {
			t.Errorf("%s: stored %q (%v), want %q", f.Path, got, ok, f.Content)
		}
	}
	for _, folder := range []string{dataplanetest.MapsDir, dataplanetest.CertsDir, dataplanetest.GeneralDir} {
		if n := len(s.StorageNames(folder)); n != want[folder] {
			t.Errorf("%s: %d files stored, want %d", folder, n, want[folder])
		}
	}
}

func wantServer(t *testing.T, s *dataplanetest.Server, name string, want dataplanetest.RuntimeServer) {
	t.Helper()
	got, ok := s.RuntimeServer("be_app", name)
	if !ok || got != want {
		t.Errorf("server be_app/%s runs %+v (%v), want %+v", name, got, ok, want)
	}
}

func wantEntries(t *testing.T, s *dataplanetest.Server, name, want string) {
	t.Helper()
	entries, ok := s.RuntimeMap(name)
	var got []string
	for _, e := range entries {
		got = append(got, e.Key+"="+e.Value)
	}
	if !ok || strings.Join(got, " ") != want {
		t.Errorf("map %s runs %q (loaded %v), want %q", name, strings.Join(got, " "), ok, want)
	}
}

func TestVersionConflictRetried(t *testing.T) {
	tests := []struct {
		name      string
		bumps     int
		conflicts int
		wantErr   error
	}{
		{name: "retried", bumps: 2, conflicts: 2},
		{name: "gives up", bumps: 10, conflicts: 4, wantErr: dataplane.ErrVersionConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newDouble(t)
			d := newDriver(t, s, nil)
			s.BumpVersionAfterReads(tt.bumps)
			c := base()
			c.backends = []string{"be_new"}
			res, err := d.Apply(t.Context(), c.bundle(s.Dir()))
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got := s.Counts().Conflicts; got != tt.conflicts {
				t.Errorf("the API refused %d stale versions, want %d", got, tt.conflicts)
			}
			if tt.wantErr == nil && (res.Conflicts != tt.conflicts || !res.Reloaded) {
				t.Errorf("result %+v", res)
			}
			if tt.wantErr != nil && dataplane.Refused(err) {
				t.Error("a conflict is retried later, not refused")
			}
		})
	}
}

// TestReloadFailed: the API accepted the configuration but HAProxy did not
// load it. The API puts the last configuration that loaded back in place
// (the version does not go back) and lists the failed reload before the last
// one that succeeded; the next Apply finds it and reloads.
func TestReloadFailed(t *testing.T) {
	ctx := t.Context()
	s := newDouble(t)
	d := newDriver(t, s, nil)
	c := base()
	if _, err := d.Apply(ctx, c.bundle(s.Dir())); err != nil {
		t.Fatal(err)
	}
	good, _ := s.Config()
	c.backends = []string{"be_new"}
	s.FailNextReload("[ALERT] forced failure")
	res, err := d.Apply(ctx, c.bundle(s.Dir()))
	if !errors.Is(err, dataplane.ErrReloadFailed) || !dataplane.Refused(err) {
		t.Fatalf("err = %v, want a refused ErrReloadFailed", err)
	}
	if res.Reloaded || res.ReloadReason != dataplane.ReasonStructure || res.ReloadID == "" ||
		!strings.Contains(res.ReloadDetail, "forced failure") {
		t.Errorf("result %+v", res)
	}
	if cfg, _ := s.Config(); cfg != good {
		t.Errorf("the API keeps the configuration that failed:\n%s", cfg)
	}
	// The next bundle finds the failed reload and reloads.
	res, err = d.Apply(ctx, c.bundle(s.Dir()))
	if err != nil || !res.Reloaded || res.ReloadReason != dataplane.ReasonPending {
		t.Fatalf("next apply: %v, %+v", err, res)
	}
	wantStored(t, s, c.bundle(s.Dir()))
	// Then the latest reload succeeded: nothing is pending any more.
	res, err = d.Apply(ctx, c.bundle(s.Dir()))
	if err != nil || res.Reloaded || len(res.Written) > 0 {
		t.Fatalf("third apply: %v, %+v", err, res)
	}
}

// TestConfigurationRejected: the API runs haproxy -c on every post of the
// configuration and refuses one that fails with a 400, before storing or
// reloading anything.
func TestConfigurationRejected(t *testing.T) {
	for _, skipReload := range []bool{false, true} {
		t.Run(fmt.Sprintf("runtime path %v", skipReload), func(t *testing.T) {
			ctx := t.Context()
			s := newDouble(t)
			d := newDriver(t, s, nil)
			c := base()
			if _, err := d.Apply(ctx, c.bundle(s.Dir())); err != nil {
				t.Fatal(err)
			}
			before, v := s.Config()
			reloads := s.Counts().Reloads
			if skipReload {
				// A server change goes through the runtime endpoints; the
				// configuration is still posted (without a reload) and
				// checked.
				c.servers[0] = "SRV_1 10.0.0.2:80"
				s.FailNextCheck("[ALERT] forced failure")
			} else {
				c.extraLine = "no-such-keyword on"
			}
			res, err := d.Apply(ctx, c.bundle(s.Dir()))
			if !errors.Is(err, dataplane.ErrRejected) || !dataplane.Refused(err) {
				t.Fatalf("err = %v, want a refused ErrRejected", err)
			}
			if res.Reloaded || res.ReloadDetail == "" {
				t.Errorf("result %+v", res)
			}
			if cfg, nv := s.Config(); cfg != before || nv != v || s.Counts().Reloads != reloads || s.Counts().Rejected != 1 {
				t.Errorf("the API changed: version %d -> %d, %+v", v, nv, s.Counts())
			}
			// A good bundle is delivered as usual.
			c = base()
			c.backends = []string{"be_new"}
			if res, err := d.Apply(ctx, c.bundle(s.Dir())); err != nil || !res.Reloaded || res.ReloadReason != dataplane.ReasonStructure {
				t.Fatalf("next apply: %v, %+v", err, res)
			}
		})
	}
}

// TestUnchangedBundle: a bundle the API already has costs no write. The API
// stores its own rewrite of the configuration and does not serve a stored
// certificate back (nor its fingerprint), so neither is compared as bytes.
func TestUnchangedBundle(t *testing.T) {
	ctx := t.Context()
	s := newDouble(t)
	d := newDriver(t, s, nil)
	c := base()
	c.cert = selfSigned(t, "a.example.com")
	c.regMap = "^/a a\n"
	if _, err := d.Apply(ctx, c.bundle(s.Dir())); err != nil {
		t.Fatal(err)
	}
	before := s.Counts()
	_, v := s.Config()
	res, err := d.Apply(ctx, c.bundle(s.Dir()))
	if err != nil || len(res.Written)+len(res.Removed)+len(res.RuntimeOps) > 0 || res.Reloaded || res.Unchanged != 5 || res.Version != v {
		t.Fatalf("%v, %+v", err, res)
	}
	if after := s.Counts(); after != before {
		t.Errorf("counts %+v, then %+v", before, after)
	}
}

// TestDriftRepaired: someone changes the configuration through the API; the
// next Apply puts the bundle back.
func TestDriftRepaired(t *testing.T) {
	ctx := t.Context()
	s := newDouble(t)
	d := newDriver(t, s, nil)
	bundle := base().bundle(s.Dir())
	if _, err := d.Apply(ctx, bundle); err != nil {
		t.Fatal(err)
	}
	cfg, v := s.Config()
	drifted := strings.Replace(cfg, "SRV_1 10.0.0.1:80", "SRV_1 10.0.0.1:80 check inter 1s", 1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost,
		s.URL()+"/v3/services/haproxy/configuration/raw?version="+itoa(v), strings.NewReader(drifted))
	req.SetBasicAuth(s.User(), s.Password())
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("drift: %s", resp.Status)
	}
	res, err := d.Apply(ctx, bundle)
	if err != nil || !res.Reloaded || res.ReloadReason != dataplane.ReasonStructure {
		t.Fatalf("apply: %v, %+v", err, res)
	}
	wantStored(t, s, bundle)
}

func TestDisableRuntime(t *testing.T) {
	ctx := t.Context()
	s := newDouble(t)
	d := newDriver(t, s, func(o *dataplane.Options) { o.DisableRuntime = true })
	c := base()
	if _, err := d.Apply(ctx, c.bundle(s.Dir())); err != nil {
		t.Fatal(err)
	}
	c.servers[0] = "SRV_1 10.0.0.7:80"
	res, err := d.Apply(ctx, c.bundle(s.Dir()))
	if err != nil || res.ReloadReason != dataplane.ReasonRuntimeDisabled || !res.Reloaded || len(res.RuntimeOps) > 0 {
		t.Fatalf("%v, %+v", err, res)
	}
	if n := s.Counts().RuntimeServerCalls; n != 0 {
		t.Errorf("%d runtime calls", n)
	}
}

func TestBadBundle(t *testing.T) {
	s := newDouble(t)
	d := newDriver(t, s, nil)
	cfg := dataplane.File{Path: "haproxy.cfg", Content: []byte(dataplanetest.DefaultConfig)}
	tests := []struct {
		name  string
		files []dataplane.File
		want  error
	}{
		{"no main", []dataplane.File{{Path: "maps/a.map"}}, dataplane.ErrConfig},
		{"absolute", []dataplane.File{cfg, {Path: "/etc/passwd"}}, dataplane.ErrBadPath},
		{"dot dot", []dataplane.File{cfg, {Path: "maps/../x"}}, dataplane.ErrBadPath},
		{"nested", []dataplane.File{cfg, {Path: "maps/sub/a.map"}}, dataplane.ErrBadPath},
		{"outside storage", []dataplane.File{cfg, {Path: "lua/a.lua"}}, dataplane.ErrBadPath},
		{"twice", []dataplane.File{cfg, {Path: "maps/a.map"}, {Path: "maps/a.map"}}, dataplane.ErrBadPath},
		// The API would store these under other names than those the
		// configuration uses: "a_b.map", "hosts.txt.map", "my_site.pem".
		{"dot in a map name", []dataplane.File{cfg, {Path: "maps/a.b.map"}}, dataplane.ErrBadPath},
		{"map without .map", []dataplane.File{cfg, {Path: "maps/hosts.txt"}}, dataplane.ErrBadPath},
		{"space in a name", []dataplane.File{cfg, {Path: "certs/my site.pem"}}, dataplane.ErrBadPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Counts()
			_, err := d.Apply(t.Context(), tt.files)
			if !errors.Is(err, tt.want) || !dataplane.Refused(err) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if s.Counts() != before {
				t.Error("a bad bundle changed something")
			}
		})
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name string
		opts dataplane.Options
		ok   bool
	}{
		{"defaults", dataplane.Options{URL: "http://127.0.0.1:5555", User: "admin"}, true},
		{"no url", dataplane.Options{User: "admin"}, false},
		{"not http", dataplane.Options{URL: "unix:///run/dp.sock", User: "admin"}, false},
		{"query", dataplane.Options{URL: "http://h:1/?a=b", User: "admin"}, false},
		{"no user", dataplane.Options{URL: "http://h:1"}, false},
		{"main in a folder", dataplane.Options{URL: "http://h:1", User: "a", Main: "conf/haproxy.cfg"}, false},
		{"same folders", dataplane.Options{URL: "http://h:1", User: "a", MapsDir: "x", CertsDir: "x"}, false},
		{"negative timeout", dataplane.Options{URL: "http://h:1", User: "a", ReloadTimeout: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := dataplane.New(tt.opts)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, dataplane.ErrConfig)) {
				t.Fatalf("err = %v", err)
			}
			if tt.ok {
				o := d.Options()
				if o.Main != "haproxy.cfg" || o.MapsDir != "maps" || o.ReloadTimeout != dataplane.DefaultReloadTimeout || o.MaxConflictRetries != 3 {
					t.Errorf("defaults not filled in: %+v", o)
				}
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	d, err := dataplane.New(dataplane.Options{URL: "http://127.0.0.1:1", User: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Apply(context.Background(), []dataplane.File{{Path: "haproxy.cfg"}})
	if !errors.Is(err, dataplane.ErrUnreachable) || dataplane.Refused(err) {
		t.Fatalf("err = %v", err)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
