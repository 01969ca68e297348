package renderer

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

func TestWebhookWatches(t *testing.T) {
	obj := func(labels map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": "x", "labels": labels}}
	}
	tests := []struct {
		name      string
		r         config.Resource
		namespace string
		obj       map[string]any
		want      bool
	}{
		{"every namespace", config.Resource{}, "a", obj(nil), true},
		{"its namespace", config.Resource{Namespace: "a"}, "a", obj(nil), true},
		{"another namespace", config.Resource{Namespace: "a"}, "b", obj(nil), false},
		{"labels match", config.Resource{LabelSelector: "app=web"}, "a", obj(map[string]any{"app": "web"}), true},
		{"labels differ", config.Resource{LabelSelector: "app=web"}, "a", obj(map[string]any{"app": "db"}), false},
		{"no labels", config.Resource{LabelSelector: "app"}, "a", map[string]any{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := watches(tt.r, tt.namespace, tt.obj); got != tt.want {
				t.Fatalf("watches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWebhookSource(t *testing.T) {
	kube := func(names ...string) *webhook {
		cfg := &config.Config{Sources: []config.Source{{Name: "files", Type: config.SourceManifests}}}
		for _, n := range names {
			cfg.Sources = append(cfg.Sources, config.Source{Name: n, Type: config.SourceKubernetes})
		}
		return &webhook{r: &renderer{cfg: cfg}}
	}
	tests := []struct {
		name, path string
		w          *webhook
		want, err  string
	}{
		{"the only kubernetes source", "", kube("k"), "k", ""},
		{"named in the path", "b", kube("a", "b"), "b", ""},
		{"several, none named", "", kube("a", "b"), "", "several kubernetes sources (a, b)"},
		{"a source that is not kubernetes", "files", kube("k"), "", `no kubernetes source "files"`},
		{"none", "", kube(), "", "no kubernetes source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.w.source(tt.path)
			if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("source(%q) = %q, %v; want %q, %q", tt.path, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestRefusalMessageIsCapped(t *testing.T) {
	var problems []string
	for range 500 {
		problems = append(problems, "lb: haproxy: haproxy.cfg:12: unknown keyword 'frobnicate' in 'backend' section")
	}
	m := refusalMessage(problems)
	if len(m) > maxMessage || !strings.Contains(m, "more)") || !strings.HasPrefix(m, "weft: ") {
		t.Fatalf("message of %d bytes:\n%s", len(m), m)
	}
	if got := refusalMessage(problems[:2]); strings.Count(got, "\n") != 2 || strings.Contains(got, "more)") {
		t.Fatalf("two problems: %q", got)
	}
}

func TestWithoutLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"haproxy: haproxy.cfg:14: unknown keyword", "haproxy: haproxy.cfg: unknown keyword"},
		{"haproxy: haproxy.cfg:22: unknown keyword", "haproxy: haproxy.cfg: unknown keyword"},
		{"template: refused", "template: refused"},
	}
	for _, tt := range tests {
		if got := withoutLine(tt.in); got != tt.want {
			t.Errorf("withoutLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWebhookRefusesWhatIsNoAdmissionReview(t *testing.T) {
	w := &webhook{r: &renderer{cfg: &config.Config{}}, log: slog.New(slog.DiscardHandler),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"type", "result"})}
	tests := []struct {
		name, method, path, ctype, body string
		want                            int
	}{
		{"another path", http.MethodPost, "/mutate", "application/json", "{}", http.StatusNotFound},
		{"a GET", http.MethodGet, WebhookPath, "application/json", "", http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, WebhookPath, "text/plain", "x", http.StatusUnsupportedMediaType},
		{"malformed", http.MethodPost, WebhookPath, "application/json", "{", http.StatusBadRequest},
		{"no request", http.MethodPost, WebhookPath, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ctype)
			w.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body, tt.want)
			}
		})
	}
}

func TestDryRunExpectsRegisteredKinds(t *testing.T) {
	bus := testkit.NATS(t)
	ctx := context.Background()
	leases, err := bus.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{msg.KindHeartbeatKey("haproxy", "v1"), msg.KindHeartbeatKey("syntax", "v2.pod"), msg.KindHeartbeatKey("haproxy", "v2.pod")} {
		data, _ := msg.Encode(msg.Heartbeat{Kind: "x", Replica: "y", At: time.Now()})
		if _, err := leases.Put(ctx, k, data); err != nil {
			t.Fatal(err)
		}
	}
	r := &renderer{leases: leases}
	tests := []struct {
		name string
		v    config.Validate
		want string
	}{
		{"configured", config.Validate{Kinds: []string{"template"}, Expect: config.ExpectConfigured}, "template"},
		{"registered and configured", config.Validate{Kinds: []string{"template"}, Expect: config.ExpectRegistered}, "haproxy,syntax,template"},
		{"registered only", config.Validate{Expect: config.ExpectRegistered}, "haproxy,syntax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.expectedKinds(ctx, tt.v)
			if err != nil || strings.Join(got, ",") != tt.want {
				t.Fatalf("expectedKinds = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}
