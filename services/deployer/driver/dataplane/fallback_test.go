package dataplane_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/services/deployer/driver/dataplane"
	"github.com/weftio/weft/services/deployer/driver/dataplane/dataplanetest"
)

// postRaw writes the configuration through the API, as someone else would.
func postRaw(t *testing.T, s *dataplanetest.Server, cfg string, skipReload bool) {
	t.Helper()
	_, v := s.Config()
	u := s.URL() + "/v3/services/haproxy/configuration/raw?version=" + itoa(v)
	want := http.StatusAccepted
	if skipReload {
		u += "&skip_reload=true"
		want = http.StatusCreated
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, u, strings.NewReader(cfg))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(s.User(), s.Password())
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("post configuration: %s", resp.Status)
	}
}

// TestRuntimeRefusedFallsBackToReload: the stored configuration names a
// server HAProxy does not run (stored without a reload); changing its
// address through the runtime endpoint is refused, and the bundle is
// delivered by a reload.
func TestRuntimeRefusedFallsBackToReload(t *testing.T) {
	ctx := t.Context()
	s := newDouble(t)
	d := newDriver(t, s, nil)
	c := base()
	if _, err := d.Apply(ctx, c.bundle(s.Dir())); err != nil {
		t.Fatal(err)
	}
	c.servers = append(c.servers, "SRV_3 10.0.0.5:80")
	postRaw(t, s, string(c.bundle(s.Dir())[0].Content), true)
	c.servers[2] = "SRV_3 10.0.0.6:80"
	res, err := d.Apply(ctx, c.bundle(s.Dir()))
	if err != nil {
		t.Fatal(err)
	}
	if res.ReloadReason != dataplane.ReasonRuntimeFailed || !res.Reloaded || !strings.Contains(res.RuntimeError, "404") {
		t.Fatalf("result %+v", res)
	}
	if got, ok := s.RuntimeServer("be_app", "SRV_3"); !ok || got.Address != "10.0.0.6" {
		t.Errorf("SRV_3 runs %+v (%v)", got, ok)
	}
}

func TestReloadTimeout(t *testing.T) {
	s := newDouble(t)
	// The double shows a reload in progress at its first look; a timeout
	// shorter than the pause between looks gives up after it.
	d := newDriver(t, s, func(o *dataplane.Options) {
		o.ReloadTimeout, o.PollInterval = time.Nanosecond, time.Hour
	})
	c := base()
	_, err := d.Apply(t.Context(), c.bundle(s.Dir()))
	if !errors.Is(err, dataplane.ErrReloadTimeout) || dataplane.Refused(err) {
		t.Fatalf("err = %v, want ErrReloadTimeout", err)
	}
}

func TestWrongPassword(t *testing.T) {
	s := newDouble(t)
	d := newDriver(t, s, func(o *dataplane.Options) { o.Password = "wrong" })
	_, err := d.Apply(t.Context(), base().bundle(s.Dir()))
	if !errors.Is(err, dataplane.ErrAPI) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err = %v", err)
	}
	// The double records the missing credentials against the
	// specification's security requirement; that is the point here.
	if v := s.Violations(); len(v) == 0 || !strings.Contains(v[0], "authentication") {
		t.Errorf("violations %q", v)
	}
	s.ClearViolations()
}
