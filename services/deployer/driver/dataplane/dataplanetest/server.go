package dataplanetest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/routers"
)

// Options configure a Server.
type Options struct {
	// User and Password are the basic authentication credentials the
	// server accepts (defaults "admin" and "adminpwd").
	User, Password string
	// HAProxy is the haproxy binary run with "-W -c -f" on every posted
	// configuration (one it rejects is refused with a 400) and on the
	// configuration at every reload (one it rejects makes the reload fail).
	// Empty: every post and reload succeeds unless FailNextCheck or
	// FailNextReload says otherwise.
	HAProxy string
	// Config is the initial configuration (version 1), stored as given, as
	// the API serves a file it has not written yet. Default: a minimal
	// valid one.
	Config string
	// Addr is the host:port the API listens on, such as "127.0.0.2:0" or
	// "127.0.0.3:41234" (any address of 127.0.0.0/8 is the loopback on
	// Linux), so that several Servers can share a port on different
	// addresses. Default: a free port on 127.0.0.1.
	Addr string
}

// DefaultConfig is the configuration a Server starts with by default.
const DefaultConfig = "global\n    log stdout format raw local0\n\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 5s\n    timeout server 5s\n"

// Counts are the calls the server served successfully, and the reloads.
type Counts struct {
	// Reloads are the reloads that succeeded, FailedReloads those that
	// failed.
	Reloads, FailedReloads int
	// ConfigWrites are the accepted posts of the raw configuration, with
	// or without a reload; Conflicts the posts refused for a stale version,
	// Rejected those refused because haproxy -c failed.
	ConfigWrites, Conflicts, Rejected int
	// RuntimeServerCalls, RuntimeMapCalls and RuntimeCertCalls are the
	// changes made through the runtime endpoints.
	RuntimeServerCalls, RuntimeMapCalls, RuntimeCertCalls int
	// StorageWrites are the creations, replacements and deletions of
	// storage files.
	StorageWrites int
}

// Reload is one reload the server performed.
type Reload struct {
	ID       string
	Status   string // "succeeded" or "failed"
	Response string
	// polled counts the looks at it: the first one sees it in progress.
	polled int
	at     int64
}

// RuntimeServer is a server's runtime state.
type RuntimeServer struct {
	Address    string
	Port       int
	Weight     int
	AdminState string // "ready" or "maint"
}

// MapEntry is one entry of a loaded map.
type MapEntry struct{ Key, Value string }

// Server is an in-memory Dataplane API v3 that checks every request and
// every answer against the specification. Storage files are also written
// under Dir, at the paths a configuration names them by: Dir()/maps/<name>,
// Dir()/certs/<name> and Dir()/files/<name>; the configuration is
// Dir()/haproxy.cfg.
type Server struct {
	t      testing.TB
	opts   Options
	srv    *httptest.Server
	router routers.Router
	mux    *http.ServeMux
	dir    string

	mu         sync.Mutex
	version    int64
	config     string
	lastGood   string
	storage    map[string]map[string][]byte // folder -> name -> content
	servers    map[string]map[string]*RuntimeServer
	loadedMaps map[string][]MapEntry // storage name -> entries
	certs      map[string][]byte     // path HAProxy loaded -> content
	reloads    []*Reload
	failNext   string
	failCheck  string
	bumpReads  int
	counts     Counts
	violations []string
}

// Storage folders under Dir.
const (
	MapsDir    = "maps"
	CertsDir   = "certs"
	GeneralDir = "files"
)

// New starts a Server; it is closed when the test ends, and the test fails
// then if a request or an answer did not match the specification.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	router, err := specRouter()
	if err != nil {
		t.Fatalf("dataplanetest: %v", err)
	}
	if opts.User == "" {
		opts.User, opts.Password = "admin", "adminpwd"
	}
	if opts.Config == "" {
		opts.Config = DefaultConfig
	}
	s := &Server{
		t: t, opts: opts, router: router, mux: http.NewServeMux(), dir: t.TempDir(),
		version: 1, config: opts.Config, lastGood: opts.Config,
		storage: map[string]map[string][]byte{MapsDir: {}, CertsDir: {}, GeneralDir: {}},
	}
	for _, d := range []string{MapsDir, CertsDir, GeneralDir} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			t.Fatalf("dataplanetest: %v", err)
		}
	}
	s.writeConfig()
	s.loadRuntime()
	s.routes()
	s.srv = httptest.NewUnstartedServer(s.validating(s.auth(s.mux)))
	if opts.Addr != "" {
		l, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			t.Fatalf("dataplanetest: %v", err)
		}
		_ = s.srv.Listener.Close()
		s.srv.Listener = l
	}
	s.srv.Start()
	t.Cleanup(func() {
		s.srv.Close()
		for _, v := range s.Violations() {
			t.Errorf("dataplanetest: the exchange does not match the Dataplane API specification: %s", v)
		}
	})
	return s
}

// URL is the API's address, without the "/v3" prefix.
func (s *Server) URL() string { return s.srv.URL }

// Dir is the folder holding the configuration and the storage files.
func (s *Server) Dir() string { return s.dir }

// User and Password are the credentials the server accepts.
func (s *Server) User() string     { return s.opts.User }
func (s *Server) Password() string { return s.opts.Password }

// Config returns the stored configuration, without its "# _md5hash" and
// "# _version" lines, and its version. After a first write it is what
// Normalize makes of the posted text; after a failed reload it is the last
// configuration that loaded (the version does not go back).
func (s *Server) Config() (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StripHeader(s.config), s.version
}

// Counts returns what the server did so far.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// Reloads returns the reloads so far, oldest first.
func (s *Server) Reloads() []Reload {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Reload, len(s.reloads))
	for i, r := range s.reloads {
		out[i] = *r
	}
	return out
}

// FailNextCheck makes the next check of a posted configuration fail with
// msg as HAProxy's answer: the post is refused with a 400.
func (s *Server) FailNextCheck(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failCheck = msg
}

// FailNextReload makes the next reload fail with msg as HAProxy's answer.
func (s *Server) FailNextReload(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = msg
}

// BumpVersionAfterReads makes each of the next n reads of the raw
// configuration increase the version once it is served, as if someone else
// wrote the configuration right after: the reader's next write conflicts.
func (s *Server) BumpVersionAfterReads(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bumpReads = n
}

// StorageFile returns a storage file (folder MapsDir, CertsDir or
// GeneralDir).
func (s *Server) StorageFile(folder, name string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.storage[folder][name]
	return b, ok
}

// StorageNames returns the names in a storage folder, sorted.
func (s *Server) StorageNames(folder string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.storage[folder] {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// RuntimeMap returns the entries of a loaded map, by storage name.
func (s *Server) RuntimeMap(name string) ([]MapEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.loadedMaps[name]
	return slices.Clone(m), ok
}

// RuntimeServer returns a server's runtime state.
func (s *Server) RuntimeServer(backend, name string) (RuntimeServer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	srv, ok := s.servers[backend][name]
	if !ok {
		return RuntimeServer{}, false
	}
	return *srv, true
}

// RuntimeCert returns the content of a loaded certificate, by the path
// HAProxy loaded it from.
func (s *Server) RuntimeCert(path string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.certs[path]
	return b, ok
}

// Violations returns the requests and answers that did not match the
// specification so far.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// ClearViolations forgets the violations recorded so far, for a test that
// provokes one on purpose.
func (s *Server) ClearViolations() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = nil
}

func (s *Server) violation(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// auth answers 401 to a request without the right credentials.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != s.opts.User || p != s.opts.Password {
			writeError(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeError answers the specification's error model.
func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]any{"code": code, "message": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"code":500,"message":"encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// path of a storage file under Dir.
func (s *Server) path(folder, name string) string { return filepath.Join(s.dir, folder, name) }

func cleanName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "/\\\x00") && name != "." && name != ".."
}
