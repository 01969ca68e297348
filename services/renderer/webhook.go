package renderer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/kubeclient/admission"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/certfile"
)

// WebhookPath is the URL path of the validating admission webhook; a
// weft.yaml with several kubernetes sources has the API server of each
// call WebhookPath + "/<source name>".
const WebhookPath = "/validate"

// Options are a renderer process's own settings (not part of weft.yaml).
type Options struct {
	// WebhookListen is the address of the validating admission webhook
	// (HTTPS); empty: no webhook.
	WebhookListen string
	// WebhookCert and WebhookKey are its serving certificate (PEM, with
	// its chain) and key, read again when the files change.
	WebhookCert, WebhookKey string
}

// Flags registers --webhook-listen, --webhook-cert and --webhook-key
// [WEFT_WEBHOOK_LISTEN, WEFT_WEBHOOK_CERT, WEFT_WEBHOOK_KEY] on fs.
func (o *Options) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.WebhookListen, "webhook-listen", os.Getenv("WEFT_WEBHOOK_LISTEN"), "address of the validating admission webhook (HTTPS, path "+WebhookPath+"), e.g. :9443; empty: none [WEFT_WEBHOOK_LISTEN]")
	fs.StringVar(&o.WebhookCert, "webhook-cert", os.Getenv("WEFT_WEBHOOK_CERT"), "the webhook's serving certificate (PEM, with its chain), read again when it changes [WEFT_WEBHOOK_CERT]")
	fs.StringVar(&o.WebhookKey, "webhook-key", os.Getenv("WEFT_WEBHOOK_KEY"), "the webhook's serving key (PEM) [WEFT_WEBHOOK_KEY]")
}

// Results of weft_renderer_webhook_requests_total.
const (
	resultAdmitted  = "admitted" // a dry run found nothing against the object
	resultRefused   = "refused"  // a dry run found problems the object causes
	resultIgnored   = "ignored"  // no watched type with the webhook, or outside its namespace and labels
	resultFailOpen  = "undecided-admitted"
	resultFailShut  = "undecided-refused"
	resultMalformed = "malformed"
)

// maxMessage caps the refusal message the API server returns to the client.
const maxMessage = 4000

// maxDryRuns bounds the dry runs in progress (each copies the index and
// compiles and renders every target); a request waits for a turn within
// its timeout.
const maxDryRuns = 2

type webhook struct {
	r        *renderer
	addr     string
	turns    chan struct{}
	certs    *certfile.Pair
	requests *prometheus.CounterVec
	log      *slog.Logger
}

func newWebhook(r *renderer, o Options) (*webhook, error) {
	if o.WebhookListen == "" {
		return nil, nil
	}
	if o.WebhookCert == "" || o.WebhookKey == "" {
		return nil, errors.New("renderer: --webhook-listen needs --webhook-cert and --webhook-key (WEFT_WEBHOOK_CERT, WEFT_WEBHOOK_KEY): the API server calls webhooks over HTTPS")
	}
	w := &webhook{r: r, addr: o.WebhookListen, turns: make(chan struct{}, maxDryRuns), log: r.env.Log.With("part", "webhook"),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_renderer_webhook_requests_total",
			Help: "Admission requests by watched type and result (admitted, refused, ignored, undecided-admitted, undecided-refused, malformed).",
		}, []string{"type", "result"})}
	certErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "weft_renderer_webhook_certificate_errors_total", Help: "Changed serving certificate files that did not load (the last good certificate is served).",
	})
	if err := svc.Register(r.env.Registry, Service, w.requests, certErrors); err != nil {
		return nil, err
	}
	var err error
	if w.certs, err = certfile.Load(o.WebhookCert, o.WebhookKey, w.log, certErrors.Inc); err != nil {
		return nil, fmt.Errorf("renderer: webhook: %w", err)
	}
	return w, nil
}

// run serves HTTPS until ctx ends, then stops within 5 s.
func (w *webhook) run(ctx context.Context) error {
	ln, err := net.Listen("tcp", w.addr)
	if err != nil {
		return fmt.Errorf("renderer: webhook: %w", err)
	}
	w.log.Info("validating admission webhook listening", "addr", ln.Addr().String(), "types", w.r.cfg.WebhookTypes())
	if err := admission.ServeTLS(ctx, ln, w, w.certs.TLSConfig(), w.log); err != nil {
		return fmt.Errorf("renderer: webhook: %w", err)
	}
	return nil
}

// ServeHTTP answers one AdmissionReview.
func (w *webhook) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("webhook: a request panicked; the API server applies the configuration's failurePolicy", "panic", p, "path", req.URL.Path)
			http.Error(rw, "internal error", http.StatusInternalServerError)
		}
	}()
	source, ok := strings.CutPrefix(req.URL.Path, WebhookPath)
	if !ok || (source != "" && !strings.HasPrefix(source, "/")) {
		http.NotFound(rw, req)
		return
	}
	review, status, err := admission.ReadReview(rw, req)
	if err != nil {
		w.requests.WithLabelValues("", resultMalformed).Inc()
		w.log.Warn("webhook: refused a request that is no AdmissionReview", "err", err, "remote", req.RemoteAddr)
		http.Error(rw, err.Error(), status)
		return
	}
	resp := w.admit(req.Context(), strings.TrimPrefix(source, "/"), review.Request)
	if err := admission.Respond(rw, review, resp); err != nil {
		w.log.Error("webhook: the answer could not be sent", "err", err)
	}
}

// admit decides one admission request.
func (w *webhook) admit(ctx context.Context, source string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	cfg := w.r.cfg
	log := w.log.With("uid", req.UID, "operation", req.Operation, "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name)
	apiVersion := req.Kind.Version
	if req.Kind.Group != "" {
		apiVersion = req.Kind.Group + "/" + req.Kind.Version
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		w.requests.WithLabelValues("", resultIgnored).Inc()
		return allowed("") // deletes are never refused
	}
	obj, err := index.Decode(req.Object.Raw)
	if err != nil {
		w.requests.WithLabelValues("", resultMalformed).Inc()
		return w.undecided(log, "", fmt.Errorf("the object does not decode: %w", err))
	}
	src, err := w.source(source)
	if err != nil {
		w.requests.WithLabelValues("", resultMalformed).Inc()
		return w.undecided(log, "", err)
	}
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	if name == "" {
		name = req.Name
	}
	var typs []string
	for _, typ := range cfg.WebhookTypes() {
		r := cfg.WatchedResources[typ]
		if r.APIVersion != apiVersion || r.Kind != req.Kind.Kind || !watches(r, req.Namespace, obj) {
			continue
		}
		typs = append(typs, typ)
	}
	if len(typs) == 0 {
		w.requests.WithLabelValues("", resultIgnored).Inc()
		return allowed("")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ValidationWebhook.Timeout.D())
	defer cancel()
	select {
	case w.turns <- struct{}{}:
		defer func() { <-w.turns }()
	case <-ctx.Done():
		w.requests.WithLabelValues(typs[0], map[bool]string{true: resultFailOpen, false: resultFailShut}[cfg.ValidationWebhook.Admits()]).Inc()
		return w.undecided(log, typs[0], fmt.Errorf("%w: %d dry runs in progress took all the time", ErrUndecided, maxDryRuns))
	}
	for _, p := range cfg.IgnorePaths() {
		p.Delete(obj)
	}
	var found []string
	for _, typ := range typs {
		p := proposal{id: string(req.UID) + "-" + typ, typ: typ, key: msg.ResourceKey(src, typ, req.Namespace, name), name: objectName(req.Namespace, name), object: obj}
		refusals, err := w.r.dryRun(ctx, p)
		if err != nil {
			w.requests.WithLabelValues(typ, map[bool]string{true: resultFailOpen, false: resultFailShut}[cfg.ValidationWebhook.Admits()]).Inc()
			return w.undecided(log, typ, err)
		}
		if len(refusals) == 0 {
			w.requests.WithLabelValues(typ, resultAdmitted).Inc()
			continue
		}
		w.requests.WithLabelValues(typ, resultRefused).Inc()
		for _, rf := range refusals {
			for _, pr := range rf.problems {
				found = append(found, rf.target+": "+pr)
			}
		}
	}
	if len(found) == 0 {
		log.Debug("webhook: admitted after a dry run")
		return allowed("")
	}
	message := refusalMessage(found)
	log.Info("webhook: refused; the object would make a target's bundle refused", "problems", found)
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: message,
	}}
}

// source is the kubernetes source the request's objects come from: named
// in the path, or the only one weft.yaml has.
func (w *webhook) source(name string) (string, error) {
	var kube []string
	for _, s := range w.r.cfg.Sources {
		if s.Type == config.SourceKubernetes {
			if s.Name == name {
				return name, nil
			}
			kube = append(kube, s.Name)
		}
	}
	switch {
	case name != "":
		return "", fmt.Errorf("no kubernetes source %q in weft.yaml (path %s/%s)", name, WebhookPath, name)
	case len(kube) == 1:
		return kube[0], nil
	case len(kube) == 0:
		return "", errors.New("weft.yaml has no kubernetes source")
	}
	return "", fmt.Errorf("weft.yaml has several kubernetes sources (%s): the webhook's path names one, %s/<source>", strings.Join(kube, ", "), WebhookPath)
}

func objectName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// watches reports whether objects of type r in namespace with obj's labels
// are watched (field selectors are not evaluated: such objects are).
func watches(r config.Resource, namespace string, obj map[string]any) bool {
	if r.Namespace != "" && namespace != "" && r.Namespace != namespace {
		return false
	}
	sel, err := labels.Parse(r.LabelSelector)
	if err != nil {
		return true
	}
	set := labels.Set{}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if ls, ok := md["labels"].(map[string]any); ok {
			for k, v := range ls {
				set[k], _ = v.(string)
			}
		}
	}
	return sel.Matches(set)
}

// undecided answers a request weft could not decide on by the failure
// policy, logged and with the reason for the client.
func (w *webhook) undecided(log *slog.Logger, typ string, err error) *admissionv1.AdmissionResponse {
	if w.r.cfg.ValidationWebhook.Admits() {
		log.Warn("webhook: admitted without a verdict (failure_policy: ignore)", "type", typ, "err", err)
		return allowed("weft could not validate this object (admitted by failure_policy ignore): " + err.Error())
	}
	log.Error("webhook: refused without a verdict (failure_policy: fail)", "type", typ, "err", err)
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
		Message: capped("weft could not validate this object in time (failure_policy fail): " + err.Error()),
	}}
}

func allowed(warning string) *admissionv1.AdmissionResponse {
	r := &admissionv1.AdmissionResponse{Allowed: true}
	if warning != "" {
		r.Warnings = []string{capped(warning)}
	}
	return r
}

// refusalMessage lists the problems, one per line, capped.
func refusalMessage(problems []string) string {
	var b strings.Builder
	b.WriteString("weft: with this object, a rendered configuration would be refused:")
	for i, p := range problems {
		line := "\n  " + p
		if b.Len()+len(line) > maxMessage-40 {
			fmt.Fprintf(&b, "\n  (and %d more)", len(problems)-i)
			break
		}
		b.WriteString(line)
	}
	return b.String()
}

func capped(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage-3] + "..."
	}
	return s
}
