// Package webhook is the puller's mutating admission webhook: an HTTPS
// server that answers the API server's admission.k8s.io/v1 AdmissionReviews
// for Pod CREATE requests. A pod whose workload a valid PrePullPolicy with
// `gate: true` selects is admitted with a JSON patch adding the scheduling
// gate gate.Name, the label gate.Label and the annotation gate.Annotation;
// any other pod is admitted unchanged.
//
// The webhook never holds a pod back by failing: a pod it cannot decide on
// (the Decider errs or does not answer within Options.Budget, the pod does
// not decode) is admitted unchanged, with a warning the client sees, a log
// line and weft_puller_gate_webhook_errors_total{reason}; so is every pod
// when the server is down, since the shipped MutatingWebhookConfiguration
// has failurePolicy Ignore. A request that is no AdmissionReview gets a 400
// naming what is wrong. The serving certificate and key are read from
// files, and read again when the files change (a Secret mounted as a
// volume is updated in place).
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/kubeclient/admission"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/certfile"
	"github.com/weftio/weft/services/puller/gate"
)

// Decider answers whether a pod being created is gated (gate.View).
type Decider interface {
	Decide(ctx context.Context, pod *corev1.Pod) (gate.Decision, error)
}

// Defaults of Options.
const (
	DefaultAddr   = ":9443"
	DefaultPath   = "/mutate-pods"
	DefaultBudget = 3 * time.Second
)

// Options configure a Server.
type Options struct {
	// Addr is the address to listen on (DefaultAddr).
	Addr string
	// Path is the URL path of the webhook (DefaultPath); any other path
	// is 404.
	Path string
	// CertFile and KeyFile hold the serving certificate (PEM, with its
	// chain) and its key.
	CertFile, KeyFile string
	// Budget is the longest a decision may take (DefaultBudget); it must
	// be shorter than the configuration's timeoutSeconds (5), so the pod
	// is admitted by the webhook rather than by the API server giving up.
	Budget time.Duration
}

// Server is the webhook.
type Server struct {
	decider Decider
	opts    Options
	log     *slog.Logger
	m       *metrics
	certs   *certfile.Pair
}

// New returns a Server deciding through d. The certificate files are read
// once here: a server without a certificate does not start.
func New(d Decider, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Server{decider: d, opts: opts, log: log, m: m}
	if opts.CertFile != "" || opts.KeyFile != "" {
		var err error
		if s.certs, err = certfile.Load(opts.CertFile, opts.KeyFile, log, m.errors.WithLabelValues(reasonCertificate).Inc); err != nil {
			return nil, fmt.Errorf("webhook: %w", err)
		}
	}
	return s, nil
}

// Run serves HTTPS on Options.Addr until ctx ends, then stops within 5 s.
func (s *Server) Run(ctx context.Context) error {
	if s.certs == nil {
		return errors.New("webhook: no serving certificate (Options.CertFile and KeyFile)")
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	if err := admission.ServeTLS(ctx, ln, s, s.certs.TLSConfig(), s.log); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return nil
}

// ServeHTTP answers one AdmissionReview.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			s.m.errors.WithLabelValues(reasonPanic).Inc()
			s.log.Error("webhook: a request panicked; nothing admitted by this answer", "panic", p, "path", r.URL.Path)
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	if r.URL.Path != s.opts.Path {
		http.NotFound(w, r)
		return
	}
	review, status, err := admission.ReadReview(w, r)
	if err != nil {
		s.m.errors.WithLabelValues(reasonMalformed).Inc()
		s.log.Warn("webhook: refused a request that is no AdmissionReview", "err", err, "remote", r.RemoteAddr)
		http.Error(w, err.Error(), status)
		return
	}
	resp := s.admit(r.Context(), review.Request)
	s.m.duration.Observe(time.Since(start).Seconds())
	if err := admission.Respond(w, review, resp); err != nil { // nothing in a response can fail to encode; said anyway
		s.m.errors.WithLabelValues(reasonMalformed).Inc()
	}
}

var podKind = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}

// admit decides on one request: always allowed, with the gate's patch
// when the pod is gated.
func (s *Server) admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind != podKind || req.Operation != admissionv1.Create || req.SubResource != "" {
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return s.failOpen(resp, req, reasonMalformed, fmt.Errorf("the pod does not decode: %w", err))
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Budget)
	defer cancel()
	d, err := s.decider.Decide(ctx, &pod)
	if err != nil {
		reason := reasonLookup
		if errors.Is(err, context.DeadlineExceeded) {
			reason = reasonTimeout
		}
		return s.failOpen(resp, req, reason, err)
	}
	if !d.Gated {
		s.m.admitted.WithLabelValues("ungated").Inc()
		return resp
	}
	ops, err := gate.AddPatch(&pod, d)
	if err == nil && len(ops) > 0 {
		resp.Patch, err = json.Marshal(ops)
	}
	if err != nil {
		return s.failOpen(resp, req, reasonMalformed, err)
	}
	if len(ops) == 0 {
		s.m.admitted.WithLabelValues("ungated").Inc()
		return resp
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.PatchType = &pt
	s.m.admitted.WithLabelValues("gated").Inc()
	s.m.gated.Inc()
	s.log.Info("webhook: pod gated until its images are warm", "namespace", req.Namespace, "pod", podName(req, &pod),
		"policy", d.Policy, "workload", string(d.Workload.Kind)+"/"+d.Workload.Name, "timeout", d.Timeout.String())
	return resp
}

// failOpen admits the pod unchanged, says why to the client (a warning),
// the log and the metrics.
func (s *Server) failOpen(resp *admissionv1.AdmissionResponse, req *admissionv1.AdmissionRequest, reason string, err error) *admissionv1.AdmissionResponse {
	s.m.errors.WithLabelValues(reason).Inc()
	s.m.admitted.WithLabelValues("failed_open").Inc()
	s.log.Warn("webhook: pod admitted without the gate", "namespace", req.Namespace, "pod", req.Name, "reason", reason, "err", err)
	resp.Patch, resp.PatchType = nil, nil
	resp.Warnings = append(resp.Warnings, fmt.Sprintf("%s scheduling gate not added: %v", gate.Name, err))
	return resp
}

func podName(req *admissionv1.AdmissionRequest, pod *corev1.Pod) string {
	switch {
	case req.Name != "":
		return req.Name
	case pod.Name != "":
		return pod.Name
	}
	return pod.GenerateName + "*"
}

// Reasons of weft_puller_gate_webhook_errors_total.
const (
	reasonMalformed   = "malformed"   // not an AdmissionReview, or a pod that does not decode
	reasonLookup      = "lookup"      // the Decider could not tell
	reasonTimeout     = "timeout"     // the Decider did not answer within the budget
	reasonCertificate = "certificate" // the changed certificate files do not load
	reasonPanic       = "panic"
)

type metrics struct {
	gated    prometheus.Counter
	admitted *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		gated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_puller_gate_pods_gated_total",
			Help: "Pods the webhook admitted with the weft.io/images scheduling gate.",
		}),
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_puller_gate_admissions_total",
			Help: "Pod CREATE reviews answered, by decision (gated, ungated, failed_open: admitted unchanged on an error).",
		}, []string{"decision"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_puller_gate_webhook_errors_total",
			Help: "Webhook errors, by reason (malformed, lookup, timeout, certificate, panic); a pod is never refused for one.",
		}, []string{"reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "weft_puller_gate_webhook_duration_seconds",
			Help:    "Time to answer an AdmissionReview.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9),
		}),
	}
	for _, r := range []string{reasonMalformed, reasonLookup, reasonTimeout, reasonCertificate, reasonPanic} {
		m.errors.WithLabelValues(r)
	}
	if err := svc.Register(reg, "puller gate webhook", m.gated, m.admitted, m.errors, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}
