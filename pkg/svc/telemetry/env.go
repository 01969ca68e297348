package telemetry

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ErrSetting is a bad value of an OpenTelemetry environment variable.
var ErrSetting = errors.New("bad OpenTelemetry setting")

// envCheck checks one variable's value when it is set.
type envCheck struct {
	name  string
	check func(string) error
}

// envChecks are the variables whose bad values the exporters and the SDK
// would only log, or silently replace by a default; weft refuses them at
// start instead. They check values only: reading them is left to the
// exporters and the SDK.
var envChecks = []envCheck{
	{"OTEL_SDK_DISABLED", isBool},
	{"OTEL_TRACES_EXPORTER", exporterList},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", oneOf(ProtocolGRPC, ProtocolHTTP)},
	{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", oneOf(ProtocolGRPC, ProtocolHTTP)},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", endpointURL},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpointURL},
	{"OTEL_EXPORTER_OTLP_INSECURE", isBool},
	{"OTEL_EXPORTER_OTLP_TRACES_INSECURE", isBool},
	{"OTEL_EXPORTER_OTLP_HEADERS", headerList},
	{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", headerList},
	{"OTEL_EXPORTER_OTLP_TIMEOUT", count},
	{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", count},
	{"OTEL_EXPORTER_OTLP_COMPRESSION", oneOf("gzip", "none")},
	{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", oneOf("gzip", "none")},
	{"OTEL_TRACES_SAMPLER", oneOf("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio")},
	{"OTEL_TRACES_SAMPLER_ARG", ratio},
	{"OTEL_BSP_SCHEDULE_DELAY", count},
	{"OTEL_BSP_EXPORT_TIMEOUT", count},
	{"OTEL_BSP_MAX_QUEUE_SIZE", count},
	{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", count},
}

// checkEnv checks every variable of envChecks that is set, and reports
// every bad one at once.
func checkEnv() error {
	var errs []error
	for _, c := range envChecks {
		v, ok := os.LookupEnv(c.name)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		if err := c.check(strings.TrimSpace(v)); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s=%q: %w", ErrSetting, c.name, v, err))
		}
	}
	return errors.Join(errs...)
}

func oneOf(values ...string) func(string) error {
	return func(v string) error {
		if slices.Contains(values, strings.ToLower(v)) {
			return nil
		}
		return fmt.Errorf("want one of %s", strings.Join(values, ", "))
	}
}

func isBool(v string) error {
	if strings.EqualFold(v, "true") || strings.EqualFold(v, "false") {
		return nil
	}
	return errors.New("want true or false")
}

func count(v string) error {
	if n, err := strconv.Atoi(v); err != nil || n < 0 {
		return errors.New("want a whole number, 0 or more")
	}
	return nil
}

func ratio(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err != nil || f < 0 || f > 1 {
		return errors.New("want a number from 0 to 1")
	}
	return nil
}

// exporterList is a comma-separated list of trace exporters, of which
// weft has otlp (and none).
func exporterList(v string) error {
	for _, e := range strings.Split(v, ",") {
		switch strings.TrimSpace(e) {
		case "otlp", "none":
		default:
			return fmt.Errorf("exporter %q: weft exports traces with otlp, or none", strings.TrimSpace(e))
		}
	}
	return nil
}

// endpointURL is a collector's address as a URL: http:// (plain) or
// https:// (TLS), with a host.
func endpointURL(v string) error {
	u, err := url.Parse(v)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want a URL such as http://localhost:4318 (https:// for TLS)")
	}
	return nil
}

// headerList is key=value pairs separated by commas, URL-encoded.
func headerList(v string) error {
	for _, pair := range strings.Split(v, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q is not key=value", pair)
		}
		if _, err := url.QueryUnescape(k); err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
		if _, err := url.QueryUnescape(val); err != nil {
			return fmt.Errorf("value of %q: %w", k, err)
		}
	}
	return nil
}
