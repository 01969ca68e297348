package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

// client sends requests to one Dataplane API.
type client struct {
	base, user, password string
	http                 *http.Client
	timeout              time.Duration
}

// request is one call of the API.
type request struct {
	method, path string
	query        url.Values
	body         []byte
	contentType  string
	// want are the statuses that count as success.
	want []int
	// versioned: the request carries the configuration version, so a 409
	// means the version is stale.
	versioned bool
}

// response is the API's answer to a request.
type response struct {
	status int
	header http.Header
	body   []byte
}

// apiError is a status the request did not want.
type apiError struct {
	method, path string
	status       int
	message      string
	versioned    bool
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.status, e.message)
}

// Is makes an apiError match ErrAPI, and ErrVersionConflict when it is the
// 409 of a versioned request (the API's answer to a stale version).
func (e *apiError) Is(target error) bool {
	return target == ErrAPI || (target == ErrVersionConflict && e.versioned && e.status == http.StatusConflict)
}

// maxBody bounds what the driver reads of an answer.
const maxBody = 64 << 20

func (c *client) do(ctx context.Context, r request) (response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return response{}, fmt.Errorf("dataplane: %s %s: %w", r.method, r.path, err)
	}
	req.SetBasicAuth(c.user, c.password)
	req.Header.Set("Accept", "application/json, text/plain, application/octet-stream")
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return response{}, fmt.Errorf("dataplane: %s %s: %w", r.method, r.path, err)
		}
		return response{}, fmt.Errorf("%w: %s %s: %w", ErrUnreachable, r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return response{}, fmt.Errorf("%w: %s %s: read answer: %w", ErrUnreachable, r.method, r.path, err)
	}
	out := response{status: resp.StatusCode, header: resp.Header, body: b}
	for _, w := range r.want {
		if resp.StatusCode == w {
			return out, nil
		}
	}
	return out, &apiError{method: r.method, path: r.path, status: resp.StatusCode, message: errorMessage(b), versioned: r.versioned}
}

// errorMessage reads the API's error model, or the text of the answer.
func errorMessage(b []byte) string {
	var e struct {
		Message *string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != nil {
		return *e.Message
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

// getJSON decodes the answer of a GET.
func (c *client) getJSON(ctx context.Context, path string, into any) error {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: path, want: []int{http.StatusOK}})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(resp.body, into); err != nil {
		return fmt.Errorf("%w: GET %s: decode answer: %w", ErrAPI, path, err)
	}
	return nil
}

// jsonBody encodes v for a request.
func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only the driver's own plain structs are encoded.
		panic(fmt.Sprintf("dataplane: encode %T: %v", v, err))
	}
	return b
}

// multipartFile lays out a form with one file part named file_upload, the
// way the API's storage and runtime upload endpoints take files.
func multipartFile(filename string, content []byte) (body []byte, contentType string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file_upload"; filename=%q`, filename))
	h.Set("Content-Type", "application/octet-stream")
	part, _ := w.CreatePart(h) // writes to a bytes.Buffer: cannot fail
	_, _ = part.Write(content)
	_ = w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

// escape makes one path segment of a name.
func escape(name string) string { return url.PathEscape(name) }
