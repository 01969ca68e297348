package testkit

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// OTLPSpan is a span an OTLPCollector received, with its resource's
// attributes.
type OTLPSpan struct {
	Service  string // the resource's service.name
	Resource map[string]string
	Name     string
	Attrs    map[string]string // the span's attributes, values as text
	TraceID  string            // hex
	SpanID   string
	ParentID string // empty: a root span
	Protocol string // grpc or http/protobuf: how it came
}

// OTLPCollector is an OpenTelemetry collector's trace receiver on
// loopback: the OTLP gRPC TraceService and the OTLP/HTTP endpoint
// POST /v1/traces (protobuf), each on a port of its own, keeping every
// span it is sent. Its ports are chosen when it is made and it listens
// only once started, so a program can be pointed at a collector that is
// not up yet.
type OTLPCollector struct {
	GRPCAddr string // host:port of the gRPC receiver
	HTTPAddr string // host:port of the HTTP receiver

	t     testing.TB
	mu    sync.Mutex
	spans []OTLPSpan
	calls int
	stop  func()
}

// NewOTLPCollector reserves the collector's ports; Start makes it listen.
// It is stopped when the test ends.
func NewOTLPCollector(t testing.TB) *OTLPCollector {
	t.Helper()
	c := &OTLPCollector{t: t, GRPCAddr: reservePort(t), HTTPAddr: reservePort(t)}
	t.Cleanup(c.Stop)
	return c
}

// StartOTLPCollector is NewOTLPCollector, started.
func StartOTLPCollector(t testing.TB) *OTLPCollector {
	t.Helper()
	c := NewOTLPCollector(t)
	c.Start()
	return c
}

// Endpoint is the collector's URL for OTEL_EXPORTER_OTLP_ENDPOINT with
// protocol grpc or http/protobuf.
func (c *OTLPCollector) Endpoint(protocol string) string {
	if protocol == "grpc" {
		return "http://" + c.GRPCAddr
	}
	return "http://" + c.HTTPAddr
}

// Start listens on the collector's ports.
func (c *OTLPCollector) Start() {
	c.t.Helper()
	gl, err := net.Listen("tcp", c.GRPCAddr)
	if err != nil {
		c.t.Fatalf("OTLP collector: %v", err)
	}
	hl, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		_ = gl.Close()
		c.t.Fatalf("OTLP collector: %v", err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, traceService{c: c})
	hs := &http.Server{Handler: http.HandlerFunc(c.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = gs.Serve(gl) }()
	go func() { defer wg.Done(); _ = hs.Serve(hl) }()
	c.mu.Lock()
	c.stop = func() {
		gs.Stop()
		_ = hs.Close()
		wg.Wait()
	}
	c.mu.Unlock()
}

// Stop stops listening; what was received stays.
func (c *OTLPCollector) Stop() {
	c.mu.Lock()
	stop := c.stop
	c.stop = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Spans returns every span received so far.
func (c *OTLPCollector) Spans() []OTLPSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]OTLPSpan(nil), c.spans...)
}

// Requests counts the export requests received, empty ones included.
func (c *OTLPCollector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// Trace returns the spans received of trace id.
func (c *OTLPCollector) Trace(id string) []OTLPSpan {
	var out []OTLPSpan
	for _, s := range c.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

func (c *OTLPCollector) keep(req *coltracepb.ExportTraceServiceRequest, protocol string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans = append(c.spans, otlpSpan(sp, res, protocol))
			}
		}
	}
}

func otlpSpan(sp *tracepb.Span, res map[string]string, protocol string) OTLPSpan {
	return OTLPSpan{
		Service: res["service.name"], Resource: res, Name: sp.GetName(), Attrs: attrs(sp.GetAttributes()),
		TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
		ParentID: hex.EncodeToString(sp.GetParentSpanId()), Protocol: protocol,
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(v.DoubleValue)
		default:
			m[kv.GetKey()] = fmt.Sprint(kv.GetValue())
		}
	}
	return m
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	c *OTLPCollector
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.c.keep(req, "grpc")
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveHTTP is OTLP/HTTP's trace endpoint, binary protobuf only.
func (c *OTLPCollector) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "POST /v1/traces only", http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct+": want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var in io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		in = zr
	}
	body, err := io.ReadAll(in)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.keep(&req, "http/protobuf")
	out, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// reservePort returns a loopback address whose port was free a moment ago.
func reservePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
	return addr
}
