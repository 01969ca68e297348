package dataplanetest

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/haproxytech/client-native/v6/storage"
)

func (s *Server) runtimeRoutes() {
	m := s.mux
	m.HandleFunc("GET "+api+"/runtime/backends/{parent_name}/servers", s.getServers)
	m.HandleFunc("GET "+api+"/runtime/backends/{parent_name}/servers/{name}", s.getServer)
	m.HandleFunc("PUT "+api+"/runtime/backends/{parent_name}/servers/{name}", s.putServer)
	m.HandleFunc("GET "+api+"/runtime/maps", s.getRuntimeMaps)
	m.HandleFunc("GET "+api+"/runtime/maps/{parent_name}/entries", s.getEntries)
	m.HandleFunc("POST "+api+"/runtime/maps/{parent_name}/entries", s.addEntry)
	m.HandleFunc("PUT "+api+"/runtime/maps/{parent_name}/entries/{id}", s.setEntry)
	m.HandleFunc("DELETE "+api+"/runtime/maps/{parent_name}/entries/{id}", s.delEntry)
	m.HandleFunc("GET "+api+"/runtime/ssl_certs", s.getRuntimeCerts)
	m.HandleFunc("PUT "+api+"/runtime/ssl_certs/{name}", s.putRuntimeCert)
}

type serverJSON struct {
	Name       string `json:"name"`
	Address    string `json:"address,omitempty"`
	Port       *int   `json:"port,omitempty"`
	Weight     *int   `json:"weight,omitempty"`
	AdminState string `json:"admin_state,omitempty"`
	OpState    string `json:"operational_state,omitempty"`
}

func serverView(name string, rs *RuntimeServer) serverJSON {
	out := serverJSON{Name: name, Address: rs.Address, AdminState: rs.AdminState, OpState: "up"}
	if rs.Port > 0 {
		out.Port = &rs.Port
	}
	w := rs.Weight
	out.Weight = &w
	if rs.AdminState == "maint" {
		out.OpState = "down"
	}
	return out
}

func (s *Server) getServers(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	be, ok := s.servers[r.PathValue("parent_name")]
	if !ok {
		writeError(w, http.StatusNotFound, "backend %s not found", r.PathValue("parent_name"))
		return
	}
	out := []serverJSON{}
	for _, name := range sortedKeys(be) {
		out = append(out, serverView(name, be[name]))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getServer(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, ok := s.servers[r.PathValue("parent_name")][r.PathValue("name")]
	if !ok {
		writeError(w, http.StatusNotFound, "server not found")
		return
	}
	writeJSON(w, http.StatusOK, serverView(r.PathValue("name"), rs))
}

// putServer sets a server's address, port, weight and admin state, as the
// runtime API's "set server" does.
func (s *Server) putServer(w http.ResponseWriter, r *http.Request) {
	var in serverJSON
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, ok := s.servers[r.PathValue("parent_name")][r.PathValue("name")]
	if !ok {
		writeError(w, http.StatusNotFound, "server %s/%s not found", r.PathValue("parent_name"), r.PathValue("name"))
		return
	}
	if in.Address != "" {
		rs.Address = in.Address
	}
	if in.Port != nil {
		rs.Port = *in.Port
	}
	if in.Weight != nil {
		rs.Weight = *in.Weight
	}
	if in.AdminState != "" {
		rs.AdminState = in.AdminState
	}
	s.counts.RuntimeServerCalls++
	writeJSON(w, http.StatusOK, serverView(r.PathValue("name"), rs))
}

// loadedMap finds a loaded map the way the API does: by file name, with or
// without its ".map" extension.
func (s *Server) loadedMap(name string) (string, bool) {
	for _, n := range []string{name, name + ".map"} {
		if _, ok := s.loadedMaps[n]; ok {
			return n, true
		}
	}
	return "", false
}

func (s *Server) getRuntimeMaps(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for i, name := range sortedKeys(s.loadedMaps) {
		out = append(out, map[string]any{
			"id": strconv.Itoa(i), "file": s.path(MapsDir, name), "storage_name": name,
			"description": "pattern loaded from file '" + s.path(MapsDir, name) + "'",
		})
	}
	writeJSON(w, http.StatusOK, out)
}

type entryJSON struct {
	ID    string `json:"id,omitempty"`
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (s *Server) getEntries(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, ok := s.loadedMap(r.PathValue("parent_name"))
	if !ok {
		writeError(w, http.StatusNotFound, "map %s not loaded", r.PathValue("parent_name"))
		return
	}
	out := []entryJSON{}
	for _, e := range s.loadedMaps[name] {
		out = append(out, entryJSON{Key: e.Key, Value: e.Value})
	}
	writeJSON(w, http.StatusOK, out)
}

// addEntry appends an entry, as "add map" does.
func (s *Server) addEntry(w http.ResponseWriter, r *http.Request) {
	var in entryJSON
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Key == "" {
		writeError(w, http.StatusBadRequest, "a map entry needs a key")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name, ok := s.loadedMap(r.PathValue("parent_name"))
	if !ok {
		writeError(w, http.StatusNotFound, "map %s not loaded", r.PathValue("parent_name"))
		return
	}
	s.loadedMaps[name] = append(s.loadedMaps[name], MapEntry{Key: in.Key, Value: in.Value})
	s.counts.RuntimeMapCalls++
	writeJSON(w, http.StatusCreated, entryJSON{Key: in.Key, Value: in.Value})
}

// setEntry changes the value of every entry of a key, as "set map" does.
func (s *Server) setEntry(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Value *string `json:"value"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Value == nil {
		writeError(w, http.StatusBadRequest, "a value is required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name, ok := s.loadedMap(r.PathValue("parent_name"))
	key := r.PathValue("id")
	if !ok || !slices.ContainsFunc(s.loadedMaps[name], func(e MapEntry) bool { return e.Key == key }) {
		writeError(w, http.StatusNotFound, "entry %s not found", key)
		return
	}
	for i := range s.loadedMaps[name] {
		if s.loadedMaps[name][i].Key == key {
			s.loadedMaps[name][i].Value = *in.Value
		}
	}
	s.counts.RuntimeMapCalls++
	writeJSON(w, http.StatusOK, entryJSON{Key: key, Value: *in.Value})
}

// delEntry removes every entry of a key, as "del map" does.
func (s *Server) delEntry(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, ok := s.loadedMap(r.PathValue("parent_name"))
	key := r.PathValue("id")
	if !ok || !slices.ContainsFunc(s.loadedMaps[name], func(e MapEntry) bool { return e.Key == key }) {
		writeError(w, http.StatusNotFound, "entry %s not found", key)
		return
	}
	s.loadedMaps[name] = slices.DeleteFunc(s.loadedMaps[name], func(e MapEntry) bool { return e.Key == key })
	s.counts.RuntimeMapCalls++
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getRuntimeCerts(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, p := range sortedKeys(s.certs) {
		out = append(out, map[string]any{"storage_name": p, "description": filepath.Base(p)})
	}
	writeJSON(w, http.StatusOK, out)
}

// putRuntimeCert replaces a loaded certificate ("set ssl cert" and "commit
// ssl cert"), by the path HAProxy loaded it from.
func (s *Server) putRuntimeCert(w http.ResponseWriter, r *http.Request) {
	content, ok := formFile(w, r)
	if !ok {
		return
	}
	if _, err := storage.ParseCertificatesInfo(content); err != nil || !strings.Contains(string(content), "PRIVATE KEY") {
		writeError(w, http.StatusBadRequest, "not a certificate with its key")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := r.PathValue("name")
	if _, ok := s.certs[name]; !ok {
		writeError(w, http.StatusNotFound, "certificate %s not loaded", name)
		return
	}
	s.certs[name] = content
	s.counts.RuntimeCertCalls++
	w.WriteHeader(http.StatusOK)
}

// formFile reads the file_upload part of a form; it answers 400 itself when
// there is none.
func formFile(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	content, _, ok := formUpload(w, r)
	return content, ok
}

func formUpload(w http.ResponseWriter, r *http.Request) ([]byte, string, bool) {
	f, h, err := r.FormFile("file_upload")
	if err != nil {
		writeError(w, http.StatusBadRequest, "file_upload: %v", err)
		return nil, "", false
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		writeError(w, http.StatusBadRequest, "file_upload: %v", err)
		return nil, "", false
	}
	return b, h.Filename, true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
