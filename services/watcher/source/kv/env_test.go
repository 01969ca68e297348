package kv

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
)

// TestEnv reads an injected environment: names as confd gives them, two
// variables giving one name, and a variable that appears later. An
// environment cannot be down, so there is no outage to test.
func TestEnv(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	vars := []string{
		"MY_APP_DB_URL=postgres://db",
		"MY_APP_PORT=8080",
		"MY_APP_EMPTY=",
		"MY_APPX_OTHER=no",
		"my_app_port=lower-case names are not selected by an upper-case prefix",
		"MY_APP_A__B=double underscore",
		"MY_APP_A_B=single underscore",
		"MY_APP_WITH=equals=inside",
		"BROKEN",
		"=nameless",
	}
	environ := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), vars...)
	}
	rec := newRecorder(t)
	src := config.Source{Type: config.SourceEnv, Prefix: "/my_app", Rescan: config.Duration(50 * time.Millisecond)}
	start(t, mustNew(t, src, opts(WithEnviron(environ))...), rec)
	want := map[string]string{
		"/db/url": "postgres://db",
		"/port":   "8080",
		"/empty":  "",
		"/a/b":    "single underscore",
		"/with":   "equals=inside",
	}
	waitValues(t, rec, want)
	o, _ := rec.object("/a/b")
	if o.Body["key"] != "MY_APP_A_B" || o.Body["source"] != "env" {
		t.Errorf("/a/b came from %v (%v), want MY_APP_A_B (env)", o.Body["key"], o.Body["source"])
	}
	problems := strings.Join(rec.syncedProblems(), "\n")
	if !strings.Contains(problems, `"MY_APP_A_B" and "MY_APP_A__B" both give the value "/a/b"; "MY_APP_A_B" is used`) {
		t.Errorf("synced problems %q do not report the collision", problems)
	}

	mu.Lock()
	vars = append(vars, "MY_APP_LATER=1")
	mu.Unlock()
	want["/later"] = "1"
	waitValues(t, rec, want)
	// The collision is not reported again on every re-read.
	if n := rec.problemCount(); n != 0 {
		t.Errorf("%d problems after re-reads, want 0: %q", n, rec.problemsAfter(0))
	}
}
