package dataplanetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"sigs.k8s.io/yaml"
)

// SpecModule is the module that ships the Dataplane API specification, and
// SpecFile the built specification inside it.
const (
	SpecModule = "github.com/haproxytech/client-native/v6"
	SpecFile   = "specification/build/haproxy_spec.yaml"
)

var spec struct {
	once   sync.Once
	router routers.Router
	err    error
}

// specRouter loads the specification once per process: from the module
// cache, where the go command finds the module this package is built with.
func specRouter() (routers.Router, error) {
	spec.once.Do(func() {
		spec.router, spec.err = loadSpec()
	})
	return spec.router, spec.err
}

func loadSpec() (routers.Router, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", SpecModule).Output()
	if err != nil {
		return nil, fmt.Errorf("locate %s: %w", SpecModule, err)
	}
	file := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(SpecFile))
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the specification: %w", err)
	}
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var doc2 openapi2.T
	if err := json.Unmarshal(j, &doc2); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	doc3, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return nil, fmt.Errorf("%s: convert to OpenAPI 3: %w", file, err)
	}
	// The specification's examples do not all match their schemas; the
	// schemas are what requests and answers are checked against.
	if err := doc3.Validate(context.Background(), openapi3.DisableExamplesValidation()); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return gorillamux.NewRouter(doc3)
}

// validating wraps the API's handler: every request is checked against the
// operation the specification has for it, and every answer against the
// operation's responses. What does not match is recorded as a violation;
// the request is still served, the way a lenient server would.
func (s *Server) validating(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		input, verr := s.checkRequest(r, body)
		if verr != nil {
			s.violation("request %s %s: %v", r.Method, r.URL.RequestURI(), verr)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if input != nil {
			if err := checkResponse(input, rec); err != nil && !knownDeviation(input, rec) {
				s.violation("answer %d to %s %s: %v", rec.Code, r.Method, r.URL.RequestURI(), err)
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// checkRequest finds the request's operation and validates the request. It
// returns the validation input for the answer (nil without an operation).
func (s *Server) checkRequest(r *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	route, params, err := s.router.FindRoute(r)
	if err != nil {
		return nil, fmt.Errorf("no operation in the specification: %w", err)
	}
	// The body is read again by the validator.
	clone := r.Clone(r.Context())
	clone.Body = io.NopCloser(bytes.NewReader(body))
	input := &openapi3filter.RequestValidationInput{
		Request: clone, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			AuthenticationFunc:    s.authenticate,
		},
	}
	return input, openapi3filter.ValidateRequest(r.Context(), input)
}

// authenticate checks the basic_auth security scheme.
func (s *Server) authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecuritySchemeName != "basic_auth" {
		return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
	}
	u, p, ok := in.RequestValidationInput.Request.BasicAuth()
	if !ok || u != s.opts.User || p != s.opts.Password {
		return errors.New("missing or wrong basic authentication")
	}
	return nil
}

// knownDeviation reports an answer that differs from the specification the
// way the real API's does. The specification says the raw configuration
// post produces text/plain for every status; the API answers its errors
// (400 when haproxy -c refuses the configuration, 409 for a stale version)
// with the JSON error model, which the answer must then be.
func knownDeviation(input *openapi3filter.RequestValidationInput, rec *httptest.ResponseRecorder) bool {
	if input.Route.Operation == nil || input.Route.Operation.OperationID != "postHAProxyConfiguration" ||
		rec.Code < 400 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		return false
	}
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	return json.Unmarshal(rec.Body.Bytes(), &e) == nil && e.Code != nil && *e.Code == rec.Code && e.Message != nil
}

func checkResponse(input *openapi3filter.RequestValidationInput, rec *httptest.ResponseRecorder) error {
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: input,
		Status:                 rec.Code,
		Header:                 rec.Header(),
		Options:                input.Options,
	}
	out.SetBodyBytes(rec.Body.Bytes())
	return openapi3filter.ValidateResponse(context.Background(), out)
}
