package host

import (
	"net/http"
	"net/http/pprof"
)

// pprofPrefix is where withPprof serves Go's profiles.
const pprofPrefix = "/debug/pprof/"

// withPprof serves Go's profiles (net/http/pprof) under pprofPrefix and
// everything else with h.
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(pprofPrefix, pprof.Index) // named profiles: heap, goroutine, ...
	mux.HandleFunc(pprofPrefix+"cmdline", pprof.Cmdline)
	mux.HandleFunc(pprofPrefix+"profile", pprof.Profile)
	mux.HandleFunc(pprofPrefix+"symbol", pprof.Symbol)
	mux.HandleFunc(pprofPrefix+"trace", pprof.Trace)
	mux.Handle("/", h)
	return mux
}
