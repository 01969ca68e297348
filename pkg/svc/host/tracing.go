package host

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// exportErrorsEvery is how often, at most, an error of the span export
// (a collector that cannot be reached) is logged.
const exportErrorsEvery = time.Minute

// tracingStopTimeout bounds the export of the last spans when the
// process stops.
const tracingStopTimeout = 5 * time.Second

// startTracing makes the process's tracing from the OpenTelemetry
// environment variables (telemetry.NewTracing): a bad value is an error
// here, before anything starts. The SDK's errors are logged on log,
// rate-limited.
func startTracing(ctx context.Context, b Binary, log *slog.Logger) (*telemetry.Tracing, error) {
	tracing, err := telemetry.NewTracing(ctx, telemetry.TracingOptions{Version: version(b), Instance: svc.ReplicaName()})
	if err != nil {
		return nil, err
	}
	otel.SetErrorHandler(telemetry.ErrorLog(log, exportErrorsEvery))
	if on, protocol, endpoint := tracing.Exporting(); on {
		if endpoint == "" {
			endpoint = "the exporter's default (localhost)"
		}
		log.Info("exporting spans over OTLP", "protocol", protocol, "endpoint", endpoint)
	}
	return tracing, nil
}

// stopTracing exports the spans left, within tracingStopTimeout.
func stopTracing(tracing *telemetry.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingStopTimeout)
	defer cancel()
	if err := tracing.Shutdown(ctx); err != nil {
		log.Warn("tracing: the last spans were not all exported", "err", err)
	}
}

// traced returns services each running with its own tracer provider, so
// that its spans name it (service.name weft-<service>) even when several
// run in one process.
func traced(services []Service, tracing *telemetry.Tracing) []Service {
	out := make([]Service, len(services))
	for i, sv := range services {
		tp := tracing.Provider(sv.Name)
		out[i] = Service{Name: sv.Name, Run: func(ctx context.Context, env svc.Env, cfg *config.Config) error {
			env.Tracer = tp
			return sv.Run(ctx, env, cfg)
		}}
	}
	return out
}

// processService names the spans the process makes outside its services:
// the service's name in a binary of one service, else the binary's
// ("weft up": weft-up).
func processService(b Binary) string {
	if len(b.Services) == 1 {
		return b.Services[0].Name
	}
	return strings.TrimPrefix(strings.ReplaceAll(b.Name, " ", "-"), "weft-")
}

// version is b.Version, or the main module's version.
func version(b Binary) string {
	if b.Version != "" {
		return b.Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}
