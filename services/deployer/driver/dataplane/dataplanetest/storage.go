package dataplanetest

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/haproxytech/client-native/v6/misc"
	"github.com/haproxytech/client-native/v6/storage"
)

// storageKinds maps the API's storage endpoints to the folders under Dir.
var storageKinds = map[string]string{
	"maps":             MapsDir,
	"ssl_certificates": CertsDir,
	"general":          GeneralDir,
}

func (s *Server) storageRoutes() {
	for ep, folder := range storageKinds {
		base := api + "/storage/" + ep
		s.mux.HandleFunc("GET "+base, func(w http.ResponseWriter, r *http.Request) { s.listStorage(w, folder) })
		s.mux.HandleFunc("POST "+base, func(w http.ResponseWriter, r *http.Request) { s.createStorage(w, r, folder) })
		s.mux.HandleFunc("GET "+base+"/{name}", func(w http.ResponseWriter, r *http.Request) { s.getStorage(w, r, folder) })
		s.mux.HandleFunc("PUT "+base+"/{name}", func(w http.ResponseWriter, r *http.Request) { s.replaceStorage(w, r, folder) })
		s.mux.HandleFunc("DELETE "+base+"/{name}", func(w http.ResponseWriter, r *http.Request) { s.deleteStorage(w, r, folder) })
	}
}

// model is the API's object for a storage file: map, general_file or
// ssl_certificate. For a certificate the API reports what client-native's
// storage.ParseCertificatesInfo finds, without a fingerprint.
func (s *Server) model(folder, name string, content []byte) map[string]any {
	m := map[string]any{"storage_name": name, "file": s.path(folder, name), "size": len(content)}
	switch folder {
	case CertsDir:
		m["description"] = "managed SSL file"
		if info, err := storage.ParseCertificatesInfo(content); err == nil {
			for k, v := range map[string]string{
				"serial": info.Serial, "subject": info.Subject, "issuers": info.Issuers,
				"domains": info.DNS, "ip_addresses": info.IPs,
			} {
				if v != "" {
					m[k] = v
				}
			}
			for k, t := range map[string]*time.Time{"not_before": info.NotBefore, "not_after": info.NotAfter} {
				if t != nil {
					m[k] = t.UTC().Format("2006-01-02T15:04:05.000Z")
				}
			}
		}
	case MapsDir:
		m["description"] = "managed but not loaded map file (no runtime ID)"
	default:
		m["description"] = "managed general use file"
	}
	return m
}

// storageName is the name the API keeps a file under: client-native's
// SanitizeFilename (letters, digits, "_" and "-" around one extension; "a.b.map"
// is "a_b.map"), and ".map" added to a map's name without it.
func storageName(folder, name string) string {
	name = misc.SanitizeFilename(name)
	if folder == MapsDir && filepath.Ext(name) != ".map" {
		name += ".map"
	}
	return name
}

// referencedAt finds a line of the configuration that names a file, as the
// API does before it deletes one (comments aside). The caller holds s.mu.
func (s *Server) referencedAt(file string) (int, string) {
	for i, line := range strings.Split(StripHeader(s.config), "\n") {
		t := strings.TrimSpace(line)
		if strings.Contains(t, file) && !strings.HasPrefix(t, "#") {
			return i + 1, t
		}
	}
	return 0, ""
}

func (s *Server) listStorage(w http.ResponseWriter, folder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	for _, name := range sortedKeys(s.storage[folder]) {
		m := s.model(folder, name, s.storage[folder][name])
		if folder == CertsDir {
			// The list names the files; their details are in the one.
			m = map[string]any{"storage_name": name, "file": s.path(folder, name)}
		}
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getStorage(w http.ResponseWriter, r *http.Request, folder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := storageName(folder, r.PathValue("name"))
	content, ok := s.storage[folder][name]
	if !ok {
		writeError(w, http.StatusNotFound, "%s not found", name)
		return
	}
	if folder == CertsDir {
		writeJSON(w, http.StatusOK, s.model(folder, name, content))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(content)
}

// createStorage stores an uploaded file under the storage name of its file
// name (storageName). Only a certificate reloads, unless skip_reload=true.
func (s *Server) createStorage(w http.ResponseWriter, r *http.Request, folder string) {
	content, name, ok := formUpload(w, r)
	if !ok {
		return
	}
	name = storageName(folder, filepath.Base(name))
	if !cleanName(name) || (folder == CertsDir && !validCert(content)) {
		writeError(w, http.StatusBadRequest, "bad file %q", name)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, exists := s.storage[folder][name]; exists {
		writeError(w, http.StatusConflict, "%s already exists", name)
		return
	}
	if !s.store(w, folder, name, content) {
		return
	}
	if folder == CertsDir {
		s.answerChange(w, r, folder, name, content, http.StatusCreated)
		return
	}
	writeJSON(w, http.StatusCreated, s.model(folder, name, content))
}

// replaceStorage replaces a file; without skip_reload=true it reloads and
// answers 202 with the Reload-ID.
func (s *Server) replaceStorage(w http.ResponseWriter, r *http.Request, folder string) {
	var content []byte
	if folder == GeneralDir {
		var ok bool
		if content, ok = formFile(w, r); !ok {
			return
		}
	} else {
		content, _ = io.ReadAll(r.Body)
	}
	if folder == CertsDir && !validCert(content) {
		writeError(w, http.StatusBadRequest, "not a certificate with its key")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := storageName(folder, r.PathValue("name"))
	if _, exists := s.storage[folder][name]; !exists {
		writeError(w, http.StatusNotFound, "%s not found", name)
		return
	}
	if !s.store(w, folder, name, content) {
		return
	}
	s.answerChange(w, r, folder, name, content, http.StatusOK)
}

// answerChange answers a storage change: a reload unless skip_reload=true.
// Certificates answer their model, the others nothing.
func (s *Server) answerChange(w http.ResponseWriter, r *http.Request, folder, name string, content []byte, certOK int) {
	reload := r.URL.Query().Get("skip_reload") != "true"
	if reload {
		w.Header().Set("Reload-ID", s.reload())
	}
	switch {
	case folder == CertsDir && content != nil && reload:
		writeJSON(w, http.StatusAccepted, s.model(folder, name, content))
	case folder == CertsDir && content != nil:
		writeJSON(w, certOK, s.model(folder, name, content))
	case reload:
		w.WriteHeader(http.StatusAccepted)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) deleteStorage(w http.ResponseWriter, r *http.Request, folder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := storageName(folder, r.PathValue("name"))
	if _, exists := s.storage[folder][name]; !exists {
		writeError(w, http.StatusNotFound, "%s not found", name)
		return
	}
	if n, line := s.referencedAt(s.path(folder, name)); n > 0 {
		writeError(w, http.StatusConflict, "rejecting attempt to delete file %s referenced in haproxy conf at line %d: %s", s.path(folder, name), n, line)
		return
	}
	if err := os.Remove(s.path(folder, name)); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	delete(s.storage[folder], name)
	s.counts.StorageWrites++
	if folder != CertsDir {
		// Only the certificate storage reloads on a deletion.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.answerChange(w, r, folder, name, nil, 0)
}

// store writes a storage file to memory and disk; it answers 500 itself
// when the disk refuses. The caller holds s.mu.
func (s *Server) store(w http.ResponseWriter, folder, name string, content []byte) bool {
	if err := os.WriteFile(s.path(folder, name), content, 0o644); err != nil {
		writeError(w, http.StatusInternalServerError, "%v", err)
		return false
	}
	s.storage[folder][name] = content
	s.counts.StorageWrites++
	return true
}

func validCert(b []byte) bool {
	info, err := storage.ParseCertificatesInfo(b)
	return err == nil && info.Sha256FingerPrint != ""
}
