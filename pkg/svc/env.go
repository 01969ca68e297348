// Package svc holds what every weft service is given to run: a NATS
// connection, JetStream, a logger, a metrics registry, a tracer provider and
// readiness checks. A service's Run takes an Env and owns nothing in it: the
// caller (a service's main, or the all-in-one binary) creates and closes it.
package svc

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftio/weft/pkg/svc/health"
)

// Env is what a service's Run needs from its host.
type Env struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	Log      *slog.Logger
	Registry prometheus.Registerer
	Tracer   trace.TracerProvider
	Health   *health.Checks
	// Replica names this process among the replicas of a service.
	Replica string
	// Site is the site this process serves at, on its leaf node (empty:
	// the hub). A deployer delivers only the targets of its site.
	Site string
}

// Check reports a missing dependency.
func (e Env) Check() error {
	var errs []error
	if e.NC == nil {
		errs = append(errs, errors.New("NATS connection missing"))
	}
	if e.JS == nil {
		errs = append(errs, errors.New("JetStream missing"))
	}
	if e.Log == nil || e.Registry == nil || e.Tracer == nil || e.Health == nil {
		errs = append(errs, errors.New("logger, registry, tracer and health are all required"))
	}
	if e.Replica == "" {
		errs = append(errs, errors.New("replica name missing"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("service environment: %w", err)
	}
	return nil
}

// For returns a copy of e whose logger names the service.
func (e Env) For(service string) Env {
	e.Log = e.Log.With("service", service)
	return e
}

// ReplicaName is the default replica name: host and process id.
func ReplicaName() string {
	h, _ := os.Hostname()
	if h == "" {
		h = "weft"
	}
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}
