package dataplanetest

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

// send sends a request and returns the answer, its body read.
func (s *Server) send(t *testing.T, method, path, contentType, body string) *http.Response {
	t.Helper()
	resp, _ := s.exchange(t, method, path, contentType, body)
	return resp
}

// TestViolations: requests and answers outside the specification are
// recorded; those inside it are not.
func TestViolations(t *testing.T) {
	tests := []struct {
		name                      string
		method, path, ctype, body string
		want                      string // in the violation; "" for none
	}{
		{"valid read", "GET", "/v3/services/haproxy/configuration/raw", "", "", ""},
		{"unknown operation", "GET", "/v3/services/haproxy/no_such_thing", "", "", "no operation in the specification"},
		{"missing required version", "POST", "/v3/services/haproxy/transactions", "", "", "version"},
		{"bad enum", "PUT", "/v3/services/haproxy/runtime/backends/be/servers/s1", "application/json", `{"admin_state":"bogus"}`, "admin_state"},
		{"bad reload id", "GET", "/v3/services/haproxy/reloads/abc", "", "", "pattern"},
		{"wrong body type", "POST", "/v3/services/haproxy/runtime/maps/m/entries", "application/json", `{"key":1}`, "key"},
		{"bad answer", "GET", "/v3/services/haproxy/runtime/backends/be_bad/servers", "", "", "answer 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(t, Options{})
			// An answer that breaks the runtime_servers schema.
			s.mux.HandleFunc("GET "+api+"/runtime/backends/be_bad/servers", func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, http.StatusOK, []map[string]any{{"name": "s1", "port": "eighty"}})
			})
			s.send(t, tt.method, tt.path, tt.ctype, tt.body)
			v := s.Violations()
			s.ClearViolations()
			if tt.want == "" {
				if len(v) > 0 {
					t.Fatalf("violations: %q", v)
				}
				return
			}
			if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), tt.want) {
				t.Fatalf("violations %q, want one about %q", v, tt.want)
			}
		})
	}
}

// TestCleanupFailsTest: a violation left at the end fails the test.
func TestCleanupFailsTest(t *testing.T) {
	var inner fakeTB
	t.Run("inner", func(t *testing.T) {
		inner.T = t
		s := New(&inner, Options{})
		s.send(t, "GET", "/v3/services/haproxy/no_such_thing", "", "")
	})
	if !inner.failed {
		t.Fatal("a violation did not fail the test")
	}
}

// fakeTB records Errorf instead of failing the test it wraps.
type fakeTB struct {
	*testing.T
	failed bool
}

func (f *fakeTB) Errorf(string, ...any) { f.failed = true }

func TestVersionAndReload(t *testing.T) {
	s := New(t, Options{})
	cfg, v := s.Config()
	if v != 1 || cfg != DefaultConfig {
		t.Fatalf("initial state %d %q", v, cfg)
	}
	if r := s.send(t, "POST", "/v3/services/haproxy/configuration/raw?version=7", "text/plain", cfg); r.StatusCode != http.StatusConflict {
		t.Fatalf("stale version: %s", r.Status)
	}
	r := s.send(t, "POST", "/v3/services/haproxy/configuration/raw?version=1", "text/plain", cfg)
	if r.StatusCode != http.StatusAccepted || r.Header.Get("Reload-ID") == "" {
		t.Fatalf("post: %s %v", r.Status, r.Header)
	}
	id := r.Header.Get("Reload-ID")
	if c := s.Counts(); c.Reloads != 1 || c.Conflicts != 1 || c.ConfigWrites != 1 {
		t.Fatalf("counts %+v", c)
	}
	if got := s.Reloads(); len(got) != 1 || got[0].ID != id || got[0].Status != "succeeded" {
		t.Fatalf("reloads %+v", got)
	}
	if v := s.Violations(); len(v) > 0 {
		t.Fatalf("violations %q", v)
	}
}

// TestAddr: Servers on two loopback addresses share one port, and each
// answers on its own address.
func TestAddr(t *testing.T) {
	a := New(t, Options{Addr: "127.0.0.2:0", Config: DefaultConfig + "# a\n"})
	u, err := url.Parse(a.URL())
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "127.0.0.2" {
		t.Fatalf("URL %s, want host 127.0.0.2", a.URL())
	}
	b := New(t, Options{Addr: "127.0.0.3:" + u.Port(), Config: DefaultConfig + "# b\n"})
	if want := "http://127.0.0.3:" + u.Port(); b.URL() != want {
		t.Fatalf("URL %s, want %s", b.URL(), want)
	}
	for s, want := range map[*Server]string{a: "# a", b: "# b"} {
		resp, body := s.exchange(t, "GET", "/v3/services/haproxy/configuration/raw", "", "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("%s answered %s %q, want %q in it", s.URL(), resp.Status, body, want)
		}
	}
}

// TestStoredAsTheAPIStoresIt: the text the API stored for
// testdata/posted.cfg, at version 15, is testdata/stored-v15.cfg (byte for
// byte, as Dataplane API v3.4.2 answered it); the double stores the same.
func TestStoredAsTheAPIStoresIt(t *testing.T) {
	posted, err := os.ReadFile("testdata/posted.cfg")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/stored-v15.cfg")
	if err != nil {
		t.Fatal(err)
	}
	got, err := normalize(string(posted), 15)
	if err != nil || got != string(want) {
		t.Fatalf("stored (%v):\n%s\nwant:\n%s", err, got, want)
	}
	s := New(t, Options{})
	r := s.send(t, "POST", "/v3/services/haproxy/configuration/raw?version=1&skip_reload=true", "text/plain", string(posted))
	if r.StatusCode != http.StatusCreated || r.Header.Get("Configuration-Version") != "2" || r.Header.Get("Configuration-Checksum") == "" {
		t.Fatalf("post: %s %v", r.Status, r.Header)
	}
	if cfg, _ := s.Config(); cfg != StripHeader(string(want)) {
		t.Fatalf("Config():\n%s", cfg)
	}
}

// TestAsTheAPIAnswers: answers the driver depends on, as the API gives
// them.
func TestAsTheAPIAnswers(t *testing.T) {
	s := New(t, Options{HAProxy: haproxyBin(t)})
	cfg, _ := s.Config()
	raw := "/v3/services/haproxy/configuration/raw"

	// A stale version: 409 with the error model and the current version.
	r, body := s.exchange(t, "POST", raw+"?version=7", "text/plain", cfg)
	if r.StatusCode != http.StatusConflict || r.Header.Get("Configuration-Version") != "1" ||
		!strings.Contains(body, `"message":"version mismatch: version in configuration file is 1, given version is 7"`) {
		t.Fatalf("stale version: %s %v %s", r.Status, r.Header, body)
	}
	// A configuration haproxy -c refuses: 400, nothing changes.
	r, body = s.exchange(t, "POST", raw+"?version=1&skip_reload=true", "text/plain", cfg+"frontend f\n    no-such-keyword\n")
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(body, "validation error") {
		t.Fatalf("invalid: %s %s", r.Status, body)
	}
	if _, v := s.Config(); v != 1 {
		t.Fatalf("version %d after a refused post", v)
	}
	// A reload: its first look shows it in progress without an id.
	r, body = s.exchange(t, "POST", raw+"?version=1", "text/plain", cfg)
	id := r.Header.Get("Reload-ID")
	if r.StatusCode != http.StatusAccepted || id != time.Now().UTC().Format("2006-01-02")+"-0" {
		t.Fatalf("post: %s %q %s", r.Status, id, body)
	}
	if _, body = s.exchange(t, "GET", "/v3/services/haproxy/reloads/"+id, "", ""); body != `{"status":"in_progress"}` {
		t.Fatalf("first look: %s", body)
	}
	if _, body = s.exchange(t, "GET", "/v3/services/haproxy/reloads/"+id, "", ""); !strings.Contains(body, `"status":"succeeded"`) {
		t.Fatalf("second look: %s", body)
	}
	// A failed reload puts the last configuration that loaded back, and is
	// listed before the last reload that succeeded.
	good, _ := s.Config()
	s.FailNextReload("[ALERT] no")
	r, _ = s.exchange(t, "POST", raw+"?version=2", "text/plain", cfg+"\nbackend be_x\n")
	if r.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %s", r.Status)
	}
	if now, v := s.Config(); now != good || v != 3 {
		t.Fatalf("after a failed reload: version %d\n%s", v, now)
	}
	_, body = s.exchange(t, "GET", "/v3/services/haproxy/reloads", "", "")
	if i, j := strings.Index(body, `"failed"`), strings.Index(body, `"succeeded"`); i < 0 || j < i {
		t.Fatalf("reloads: %s", body)
	}

	// Storage names: client-native's SanitizeFilename, and ".map" for maps.
	for _, tc := range []struct{ ep, upload, stored string }{
		{"maps", "a.b.map", "a_b.map"}, {"maps", "plain", "plain.map"}, {"general", "x y.txt", "x_y.txt"},
	} {
		body, ct := formBody(t, tc.upload, "k v\n")
		r, got := s.exchange(t, "POST", "/v3/services/haproxy/storage/"+tc.ep, ct, body)
		if r.StatusCode != http.StatusCreated || !strings.Contains(got, `"storage_name":"`+tc.stored+`"`) {
			t.Fatalf("%s: %s %s", tc.upload, r.Status, got)
		}
	}
	// A file the configuration names cannot be deleted.
	body, ct := formBody(t, "used.map", "k v\n")
	s.exchange(t, "POST", "/v3/services/haproxy/storage/maps", ct, body)
	_, v := s.Config()
	used := cfg + "\nfrontend f\n    bind 127.0.0.1:18099\n    http-request set-var(txn.x) str(a),map(" + s.path(MapsDir, "used.map") + ")\n"
	if r, body := s.exchange(t, "POST", raw+"?skip_reload=true&version="+strconv.FormatInt(v, 10), "text/plain", used); r.StatusCode != http.StatusCreated {
		t.Fatalf("post: %s %s", r.Status, body)
	}
	if r, body := s.exchange(t, "DELETE", "/v3/services/haproxy/storage/maps/used.map", "", ""); r.StatusCode != http.StatusConflict || !strings.Contains(body, "referenced in haproxy conf") {
		t.Fatalf("delete: %s %s", r.Status, body)
	}
}

// exchange sends a request and returns the answer with its body.
func (s *Server) exchange(t *testing.T, method, path, contentType, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(s.User(), s.Password())
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, strings.TrimSpace(string(b))
}

func formBody(t *testing.T, name, content string) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	part, err := w.CreateFormFile("file_upload", name)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = part.Write([]byte(content))
	_ = w.Close()
	return buf.String(), w.FormDataContentType()
}

func haproxyBin(t *testing.T) string {
	t.Helper()
	return testkit.HAProxy(t)
}
