// Package telemetry carries OpenTelemetry trace context through NATS message
// headers (W3C traceparent), starts the spans of a handling's steps (Step),
// builds the JSON logger every service logs
// with (its records carry the current trace and span ids, and durations
// are written as Go duration strings ("1.5s", "250ms"), not nanoseconds),
// and makes a process's tracer providers (Tracing): one per service, whose
// spans name the service (service.name weft-<service>) and leave the
// process through the official OTLP exporters when the standard
// OpenTelemetry environment variables ask for it, batched and flushed on
// Shutdown. A bad value of those variables is an error at start
// (ErrSetting), naming the variable; a collector that cannot be reached
// only costs spans, reported through otel's error handler (ErrorLog).
package telemetry

import (
	"context"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftio/weft/pkg/msg"
)

var propagator = propagation.TraceContext{}

// Extract returns ctx carrying the remote span context found in h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, msg.Carrier(h))
}

// Inject writes ctx's span context into h (traceparent, tracestate).
func Inject(ctx context.Context, h nats.Header) {
	if h == nil {
		return
	}
	propagator.Inject(ctx, msg.Carrier(h))
}

// NewTracerProvider returns an SDK tracer provider that samples every span
// and exports them to the given exporters (none: spans still get ids, which
// logs and headers carry).
func NewTracerProvider(exporters ...sdktrace.SpanExporter) *sdktrace.TracerProvider {
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample())}
	for _, e := range exporters {
		opts = append(opts, sdktrace.WithSyncer(e))
	}
	return sdktrace.NewTracerProvider(opts...)
}

// NewLogger returns a JSON logger at level whose records carry trace_id and
// span_id when the context has a span, and whose time.Duration values read
// like "1.5s".
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(traceHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationString})})
}

// durationString writes a time.Duration attribute (in a group too) as its
// String form instead of slog's integer nanoseconds.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(a)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// Step starts a span for one step of the work ctx's span stands for (a
// message's handling), from that span's own provider: a step is traced
// exactly when its work is, and costs nothing when it is not. The caller
// ends it.
func Step(ctx context.Context, name string) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer("github.com/weftio/weft").Start(ctx, name)
}
