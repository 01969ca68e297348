package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Protocols of OTLP export (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// TracingOptions describe the process whose spans a Tracing exports.
type TracingOptions struct {
	// Version is service.version (empty: "unknown").
	Version string
	// Instance is service.instance.id: the host (or pod) and process id.
	Instance string
}

// reconnect is how the gRPC exporter reconnects to a collector it lost,
// or never reached: gRPC's backoff, at most reconnectMax apart rather than
// two minutes, so spans flow again soon after the collector is back.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMax},
	MinConnectTimeout: 5 * time.Second,
}

const reconnectMax = 5 * time.Second

// Tracing is a process's tracer providers, one per service, each with
// its own resource (service.name weft-<service>) and all exporting through
// one OTLP exporter when the OpenTelemetry environment variables ask for
// one. Without one, spans still get ids (logs and message headers carry
// them) and go nowhere.
type Tracing struct {
	opts     TracingOptions
	exporter sdktrace.SpanExporter // nil: spans are not exported
	protocol string
	endpoint string

	exported, failed *prometheus.CounterVec

	mu        sync.Mutex
	providers map[string]*sdktrace.TracerProvider
	stopped   bool
}

// NewTracing reads the OpenTelemetry environment variables and returns the
// process's tracing. The exporter is the official OTLP exporter of the
// protocol chosen (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then
// OTEL_EXPORTER_OTLP_PROTOCOL, default http/protobuf), which reads the
// endpoint, headers, TLS, timeout and compression variables itself; the
// SDK reads OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_* and
// OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME. Spans are exported when
// OTEL_TRACES_EXPORTER is otlp, or unset and an OTLP endpoint is set; never
// when it is none or OTEL_SDK_DISABLED is true. A value those readers would
// only log and ignore (an unknown protocol, an endpoint that is not an
// http(s) URL, a malformed header list, ...) is an error wrapping
// ErrSetting that names the variable. Nothing is dialed here: a collector
// that cannot be reached shows as export errors (otel.Handle), later.
func NewTracing(ctx context.Context, o TracingOptions) (*Tracing, error) {
	if err := checkEnv(); err != nil {
		return nil, err
	}
	// The resource reads OTEL_RESOURCE_ATTRIBUTES: check it now.
	if _, err := o.resource(ctx, "check"); err != nil {
		return nil, err
	}
	t := &Tracing{
		opts: o,
		exported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_tracing_spans_exported_total",
			Help: "Spans the OTLP exporter delivered, by service.",
		}, []string{"service"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_tracing_spans_failed_total",
			Help: "Spans the OTLP exporter could not deliver (dropped after its retries), by service.",
		}, []string{"service"}),
		providers: map[string]*sdktrace.TracerProvider{},
	}
	if !exporting() {
		return t, nil
	}
	t.protocol = envProtocol()
	var err error
	switch t.protocol {
	case ProtocolGRPC:
		t.exporter, err = otlptracegrpc.New(ctx, otlptracegrpc.WithDialOption(grpc.WithConnectParams(reconnect)))
	default:
		t.exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter (%s): %w", t.protocol, err)
	}
	t.endpoint = firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	return t, nil
}

// Exporting reports whether spans leave the process, and how: the
// protocol and the endpoint variable's value (empty: the exporter's
// default, localhost).
func (t *Tracing) Exporting() (on bool, protocol, endpoint string) {
	return t.exporter != nil, t.protocol, t.endpoint
}

// Metrics are the exported and failed span counters.
func (t *Tracing) Metrics() []prometheus.Collector {
	return []prometheus.Collector{t.exported, t.failed}
}

// Provider returns the tracer provider of service (made on first use and
// kept: services restarted on a new configuration keep theirs). Its spans'
// resource names weft-<service>, unless OTEL_SERVICE_NAME (or
// service.name in OTEL_RESOURCE_ATTRIBUTES) names another.
func (t *Tracing) Provider(service string) trace.TracerProvider {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tp, ok := t.providers[service]; ok {
		return tp
	}
	// Checked by NewTracing: the variables have not changed since.
	res, _ := t.opts.resource(context.Background(), service)
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if t.exporter != nil && !t.stopped {
		opts = append(opts, sdktrace.WithBatcher(counting{
			SpanExporter: t.exporter,
			exported:     t.exported.WithLabelValues(service),
			failed:       t.failed.WithLabelValues(service),
		}))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	t.providers[service] = tp
	return tp
}

// Shutdown exports the spans every provider still holds, then closes the
// exporter. It returns when that is done or ctx is, whichever is first: a
// collector that cannot be reached does not hold a stopping process.
func (t *Tracing) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	t.stopped = true
	tps := make([]*sdktrace.TracerProvider, 0, len(t.providers))
	for _, tp := range t.providers {
		tps = append(tps, tp)
	}
	t.mu.Unlock()
	var errs []error
	for _, tp := range tps {
		errs = append(errs, tp.Shutdown(ctx))
	}
	if t.exporter != nil {
		errs = append(errs, t.exporter.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// resource is the resource of service's spans: weft's attributes, then
// the SDK's, then those of the environment, which win.
func (o TracingOptions) resource(ctx context.Context, service string) (*resource.Resource, error) {
	version := o.Version
	if version == "" {
		version = "unknown"
	}
	attrs := []attribute.KeyValue{
		attribute.String("service.name", "weft-"+service),
		attribute.String("service.version", version),
	}
	if o.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", o.Instance))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES=%q: %w", ErrSetting, os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), err)
	}
	return res, nil
}

// counting is the process's exporter as one provider's batch processor
// sees it: its spans are counted, and shutting it down leaves the shared
// exporter to Tracing.Shutdown.
type counting struct {
	sdktrace.SpanExporter
	exported, failed prometheus.Counter
}

func (c counting) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.failed.Add(float64(len(spans)))
	} else {
		c.exported.Add(float64(len(spans)))
	}
	return err
}

func (counting) Shutdown(context.Context) error { return nil }

// exporting reports whether the environment asks for OTLP export.
func exporting() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if v := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); v != "" {
		for _, e := range strings.Split(v, ",") {
			if strings.TrimSpace(e) == "otlp" {
				return true
			}
		}
		return false
	}
	return firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// envProtocol is the OTLP protocol the environment names.
func envProtocol() string {
	if p := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
		return p
	}
	return ProtocolHTTP
}

// firstEnv is the value of the first of names that is set and not empty.
func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// ErrorLog returns an OpenTelemetry error handler (otel.SetErrorHandler)
// that logs the SDK's errors, such as an export to a collector that cannot
// be reached, at WARN on log: the first at once, then at most one every
// interval, saying how many were left out meanwhile.
func ErrorLog(log *slog.Logger, every time.Duration) *RateLimitedErrors {
	return &RateLimitedErrors{log: log, every: every}
}

// RateLimitedErrors is the handler ErrorLog returns.
type RateLimitedErrors struct {
	log   *slog.Logger
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	skipped int
}

// Handle implements otel.ErrorHandler.
func (h *RateLimitedErrors) Handle(err error) {
	h.mu.Lock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < h.every {
		h.skipped++
		h.mu.Unlock()
		return
	}
	skipped := h.skipped
	h.last, h.skipped = now, 0
	h.mu.Unlock()
	h.log.Warn("tracing: OpenTelemetry error (spans may not reach the collector)", "err", err.Error(), "left_out", skipped, "next_in", h.every)
}
