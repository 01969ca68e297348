package dataplanetest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	parser "github.com/haproxytech/client-native/v6/config-parser"
	"github.com/haproxytech/client-native/v6/config-parser/options"
	"github.com/haproxytech/client-native/v6/config-parser/params"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/weftio/weft/pkg/haproxycfg"
)

const api = "/v3/services/haproxy"

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET "+api+"/configuration/raw", s.getRaw)
	m.HandleFunc("POST "+api+"/configuration/raw", s.postRaw)
	m.HandleFunc("GET "+api+"/reloads", s.getReloads)
	m.HandleFunc("GET "+api+"/reloads/{id}", s.getReload)
	s.runtimeRoutes()
	s.storageRoutes()
}

// rawText is the stored configuration as the API serves it: the file as
// it is on disk, with the "# _md5hash" and "# _version" lines the API writes
// (none before the first write).
func (s *Server) rawText() string { return s.config }

func (s *Server) getRaw(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	text, v := s.rawText(), s.version
	if s.bumpReads > 0 {
		s.bumpReads--
		s.version++
	}
	s.mu.Unlock()
	w.Header().Set("Configuration-Version", strconv.FormatInt(v, 10))
	if sum := md5Line(text); sum != "" {
		w.Header().Set("Configuration-Checksum", sum)
	}
	writeText(w, http.StatusOK, text)
}

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, text)
}

// Normalize returns what the API stores for a posted configuration, less
// its "# _md5hash" and "# _version" lines: client-native's parser reads the
// text and writes it again (two spaces of indentation, an unnamed defaults
// section named "unnamed_defaults_1", comments kept), with the options the
// API uses (UseMd5Hash, NoNamedDefaultsFrom).
func Normalize(text string) (string, error) {
	stored, err := normalize(text, 0)
	if err != nil {
		return "", err
	}
	return StripHeader(stored), nil
}

// normalize is the stored text of a posted configuration at a version,
// header lines included.
func normalize(text string, version int64) (string, error) {
	p, err := haproxycfg.ParseWith(fmt.Sprintf("# _version=%d\n%s", version, StripHeader(text)),
		options.UseMd5Hash, options.NoNamedDefaultsFrom)
	if err != nil {
		return "", err
	}
	return p.StringWithHash()
}

// StripHeader drops the "# _md5hash=..." and "# _version=N" lines at the
// top of a stored configuration.
func StripHeader(text string) string {
	for {
		first, rest, ok := strings.Cut(text, "\n")
		t := strings.TrimSpace(first)
		if !ok || !(strings.HasPrefix(t, "# _md5hash") || strings.HasPrefix(t, "# _version")) {
			return text
		}
		text = rest
	}
}

// md5Line is the checksum of a stored configuration's "# _md5hash" line.
func md5Line(text string) string {
	first, _, _ := strings.Cut(text, "\n")
	sum, ok := strings.CutPrefix(strings.TrimSpace(first), "# _md5hash=")
	if !ok {
		return ""
	}
	return sum
}

// postRaw replaces the configuration, as the API does: 409 when the
// version is not the current one (unless skip_version); then the text is
// rewritten by client-native's parser and checked with haproxy -c (when
// Options.HAProxy is set) whether or not it reloads, and a configuration
// that fails is refused with a 400 and changes nothing; else 201 without a
// reload (skip_reload), or 202 with the Reload-ID. The answer is the stored
// text. Errors are the API's JSON error model, although the specification
// says text/plain (see validate.go).
func (s *Server) postRaw(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body) // the validating wrapper already read it
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Configuration-Version", strconv.FormatInt(s.version, 10))
	if q.Get("skip_version") != "true" {
		v, err := strconv.ParseInt(q.Get("version"), 10, 64)
		if err != nil || v != s.version {
			s.counts.Conflicts++
			writeError(w, http.StatusConflict, "version mismatch: version in configuration file is %d, given version is %s", s.version, q.Get("version"))
			return
		}
	}
	if len(body) > 0 && !bytes.ContainsRune(body, '\n') {
		writeError(w, http.StatusBadRequest, "invalid configuration: no newline character found")
		return
	}
	stored, err := normalize(string(body), s.version+1)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if msg := s.check(stored); msg != "" {
		s.counts.Rejected++
		writeError(w, http.StatusBadRequest, "validation error: %s", msg)
		return
	}
	s.config = stored
	s.version++
	s.counts.ConfigWrites++
	s.writeConfig()
	w.Header().Set("Configuration-Version", strconv.FormatInt(s.version, 10))
	w.Header().Set("Configuration-Checksum", md5Line(stored))
	if q.Get("skip_reload") == "true" {
		writeText(w, http.StatusCreated, s.rawText())
		return
	}
	w.Header().Set("Reload-ID", s.reload())
	writeText(w, http.StatusAccepted, s.rawText())
}

// check runs haproxy -c on a configuration (when Options.HAProxy is set),
// next to the stored one so that relative paths mean the same; it returns
// HAProxy's answer when the configuration fails. The caller holds s.mu.
func (s *Server) check(text string) string {
	if msg := s.failCheck; msg != "" {
		s.failCheck = ""
		return msg
	}
	if s.opts.HAProxy == "" {
		return ""
	}
	f := filepath.Join(s.dir, "haproxy.cfg.check")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		return err.Error()
	}
	defer os.Remove(f)
	out, err := exec.Command(s.opts.HAProxy, "-W", "-c", "-f", f).CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out) + "\n" + err.Error())
	}
	return ""
}

func (s *Server) writeConfig() {
	if err := os.WriteFile(filepath.Join(s.dir, "haproxy.cfg"), []byte(s.config), 0o644); err != nil {
		s.violations = append(s.violations, "dataplanetest: write haproxy.cfg: "+err.Error())
	}
}

// reload checks the configuration on disk (a forced failure, then haproxy
// -c when configured) and, when it passes, loads the runtime state from it.
// It returns the reload's id. The caller holds s.mu.
func (s *Server) reload() string {
	rl := &Reload{ID: fmt.Sprintf("%s-%d", time.Now().UTC().Format("2006-01-02"), len(s.reloads)), Status: "succeeded", at: time.Now().Unix()}
	s.reloads = append(s.reloads, rl)
	switch {
	case s.failNext != "":
		rl.Status, rl.Response = "failed", s.failNext
		s.failNext = ""
	case s.opts.HAProxy != "":
		out, err := exec.Command(s.opts.HAProxy, "-W", "-c", "-f", filepath.Join(s.dir, "haproxy.cfg")).CombinedOutput()
		if err != nil {
			rl.Status, rl.Response = "failed", string(out)+err.Error()
		}
	}
	if rl.Status == "failed" {
		// The API puts back the last configuration that loaded.
		s.counts.FailedReloads++
		s.config = s.lastGood
		s.writeConfig()
		return rl.ID
	}
	s.counts.Reloads++
	s.lastGood = s.config
	s.loadRuntime()
	return rl.ID
}

// loadRuntime sets the runtime state from the configuration: its servers,
// the storage maps and certificates whose path it names. The caller holds
// s.mu (or has not shared s yet).
func (s *Server) loadRuntime() {
	s.servers = map[string]map[string]*RuntimeServer{}
	s.loadedMaps = map[string][]MapEntry{}
	s.certs = map[string][]byte{}
	p, err := haproxycfg.Parse(s.config)
	if err == nil {
		for _, sec := range []parser.Section{parser.Backends, parser.Listen} {
			names, _ := p.SectionsGet(sec)
			for _, name := range names {
				s.servers[name] = runtimeServers(p, sec, name)
			}
		}
	}
	for name, content := range s.storage[MapsDir] {
		if strings.Contains(s.config, s.path(MapsDir, name)) {
			s.loadedMaps[name] = parseMap(content)
		}
	}
	for name, content := range s.storage[CertsDir] {
		if p := s.path(CertsDir, name); strings.Contains(s.config, p) {
			s.certs[p] = content
		}
	}
}

func runtimeServers(p parser.Parser, sec parser.Section, name string) map[string]*RuntimeServer {
	out := map[string]*RuntimeServer{}
	data, err := p.Get(sec, name, "server")
	if err != nil {
		return out
	}
	list, _ := data.([]types.Server)
	for _, srv := range list {
		rs := &RuntimeServer{Address: srv.Address, Weight: 1, AdminState: "ready"}
		if ap, err := netip.ParseAddrPort(srv.Address); err == nil {
			rs.Address, rs.Port = ap.Addr().String(), int(ap.Port())
		}
		for _, o := range srv.Params {
			switch o := o.(type) {
			case *params.ServerOptionValue:
				if o.Name == "weight" {
					rs.Weight, _ = strconv.Atoi(o.Value)
				}
			case *params.ServerOptionWord:
				if o.Name == "disabled" {
					rs.AdminState = "maint"
				}
			}
		}
		out[srv.Name] = rs
	}
	return out
}

// parseMap reads a map file's entries.
func parseMap(b []byte) []MapEntry {
	var out []MapEntry
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		l := strings.TrimLeft(strings.TrimRight(string(line), "\r"), " \t")
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, _ := strings.Cut(l, " ")
		out = append(out, MapEntry{Key: k, Value: strings.TrimLeft(v, " \t")})
	}
	return out
}

type reloadJSON struct {
	ID        string `json:"id,omitempty"`
	Status    string `json:"status"`
	Response  string `json:"response,omitempty"`
	Timestamp int64  `json:"reload_timestamp,omitempty"`
}

func (r *Reload) done() reloadJSON {
	return reloadJSON{ID: r.ID, Status: r.Status, Response: r.Response, Timestamp: r.at}
}

// view is what a look at a reload shows; the first look sees it in
// progress, as the API shows a reload still waiting for its turn: without
// its id.
func (r *Reload) view() reloadJSON {
	r.polled++
	if r.polled == 1 {
		return reloadJSON{Status: "in_progress"}
	}
	return r.done()
}

// getReloads lists the reloads the way the API keeps them: the failed ones
// (here newest first; the API's order is that of a Go map), then only the
// last one that succeeded.
func (s *Server) getReloads(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []reloadJSON{}
	var last *Reload
	for i := len(s.reloads) - 1; i >= 0; i-- {
		switch r := s.reloads[i]; {
		case r.Status == "failed":
			out = append(out, r.done())
		case last == nil:
			last = r
		}
	}
	if last != nil {
		out = append(out, last.done())
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getReload(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rl := range s.reloads {
		if rl.ID == r.PathValue("id") {
			writeJSON(w, http.StatusOK, rl.view())
			return
		}
	}
	writeError(w, http.StatusNotFound, "reload %s not found", r.PathValue("id"))
}
