package host

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPprofBesideMetrics: withPprof serves Go's profiles and hands every
// other path to the health handler; behind only (the metrics address of
// a split listener) the prefix lets every profile through and nothing
// else.
func TestPprofBesideMetrics(t *testing.T) {
	health := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" && r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("health " + r.URL.Path))
	})
	one := withPprof(health)
	split := only(one, "/metrics", pprofPrefix)
	tests := []struct {
		name    string
		h       http.Handler
		path    string
		code    int
		healthy bool // answered by the health handler
	}{
		{"one listener: a named profile", one, "/debug/pprof/heap", http.StatusOK, false},
		{"one listener: the index", one, "/debug/pprof/", http.StatusOK, false},
		{"one listener: cmdline", one, "/debug/pprof/cmdline", http.StatusOK, false},
		{"one listener: metrics", one, "/metrics", http.StatusOK, true},
		{"one listener: healthz", one, "/healthz", http.StatusOK, true},
		{"metrics listener: a named profile", split, "/debug/pprof/goroutine", http.StatusOK, false},
		{"metrics listener: metrics", split, "/metrics", http.StatusOK, true},
		{"metrics listener: not healthz", split, "/healthz", http.StatusNotFound, false},
		{"metrics listener: not beside the prefix", split, "/debug/pprofx", http.StatusNotFound, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.code {
				t.Fatalf("GET %s: %d, want %d", tc.path, rec.Code, tc.code)
			}
			if got := rec.Body.String() == "health "+tc.path; got != tc.healthy {
				t.Fatalf("GET %s answered by the health handler: %v, want %v (%.60q)", tc.path, got, tc.healthy, rec.Body.String())
			}
		})
	}
}
