package dataplanetest

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
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
	"github.com/haproxytech/client-native/v6/config-parser/params"
	"github.com/haproxytech/client-native/v6/config-parser/types"

	"github.com/weftio/weft/services/deployer/driver/internal/haproxycfg"
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

// rawText is the stored configuration as the API serves it: with its
// version line.
func (s *Server) rawText() string {
	return fmt.Sprintf("# _version=%d\n%s", s.version, s.config)
}

func (s *Server) getRaw(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	text, v := s.rawText(), s.version
	if s.bumpReads > 0 {
		s.bumpReads--
		s.version++
	}
	s.mu.Unlock()
	sum := md5.Sum([]byte(text))
	w.Header().Set("Configuration-Version", strconv.FormatInt(v, 10))
	w.Header().Set("Configuration-Checksum", hex.EncodeToString(sum[:]))
	writeText(w, http.StatusOK, text)
}

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, text)
}

// postRaw replaces the configuration: 409 when the version is not the
// current one (unless skip_version), 201 without a reload (skip_reload),
// else 202 with the Reload-ID.
func (s *Server) postRaw(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body) // the validating wrapper already read it
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.Get("skip_version") != "true" {
		v, err := strconv.ParseInt(q.Get("version"), 10, 64)
		if err != nil || v != s.version {
			s.counts.Conflicts++
			w.Header().Set("Configuration-Version", strconv.FormatInt(s.version, 10))
			writeText(w, http.StatusConflict, fmt.Sprintf("version mismatch: have %d, given %q", s.version, q.Get("version")))
			return
		}
	}
	text := string(body)
	if first, rest, ok := strings.Cut(text, "\n"); ok && strings.HasPrefix(strings.TrimSpace(first), "# _version") {
		text = rest
	}
	s.config = text
	s.version++
	s.counts.ConfigWrites++
	s.writeConfig()
	w.Header().Set("Configuration-Version", strconv.FormatInt(s.version, 10))
	if q.Get("skip_reload") == "true" {
		writeText(w, http.StatusCreated, s.rawText())
		return
	}
	w.Header().Set("Reload-ID", s.reload())
	writeText(w, http.StatusAccepted, s.rawText())
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
	rl := &Reload{ID: fmt.Sprintf("%s-%d", time.Now().UTC().Format("2006-01-02"), len(s.reloads)+1), Status: "succeeded"}
	s.reloads = append(s.reloads, rl)
	switch {
	case s.failNext != "":
		rl.Status, rl.Response = "failed", s.failNext
		s.failNext = ""
	case s.opts.HAProxy != "":
		out, err := exec.Command(s.opts.HAProxy, "-c", "-f", filepath.Join(s.dir, "haproxy.cfg")).CombinedOutput()
		if err != nil {
			rl.Status, rl.Response = "failed", string(out)+err.Error()
		}
	}
	if rl.Status == "failed" {
		s.counts.FailedReloads++
		return rl.ID
	}
	s.counts.Reloads++
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
	ID       string `json:"id"`
	Status   string `json:"status"`
	Response string `json:"response,omitempty"`
}

// view is what a look at a reload shows; the first look sees it in
// progress.
func (r *Reload) view() reloadJSON {
	r.polled++
	if r.polled == 1 {
		return reloadJSON{ID: r.ID, Status: "in_progress"}
	}
	return reloadJSON{ID: r.ID, Status: r.Status, Response: r.Response}
}

func (s *Server) getReloads(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]reloadJSON, 0, len(s.reloads))
	for _, r := range s.reloads {
		out = append(out, reloadJSON{ID: r.ID, Status: r.Status, Response: r.Response})
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
