// Package admission is what every weft admission webhook shares with the
// others: reading and checking the AdmissionReview the API server POSTs,
// writing the answer back in the same API version, and serving HTTPS until
// the context ends. What a webhook decides is its own; this package holds
// no state and decides nothing.
package admission

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// MaxBody bounds a request body: the API server sends objects of at most
// 3 MiB, in a review that may hold the object twice (old and new).
const MaxBody = 7 << 20

// ReadReview reads and checks the AdmissionReview of r. An error comes
// with the HTTP status to answer it with.
func ReadReview(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s: an AdmissionReview is POSTed", r.Method)
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %q: an AdmissionReview is application/json", r.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", MaxBody)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("read the request body: %w", err)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	gv := admissionv1.SchemeGroupVersion.String()
	switch {
	case review.APIVersion != gv || review.Kind != "AdmissionReview":
		return nil, http.StatusBadRequest, fmt.Errorf("malformed AdmissionReview: apiVersion %q kind %q, want %s AdmissionReview", review.APIVersion, review.Kind, gv)
	case review.Request == nil:
		return nil, http.StatusBadRequest, errors.New("malformed AdmissionReview: no request")
	case review.Request.UID == "":
		return nil, http.StatusBadRequest, errors.New("malformed AdmissionReview: request without uid")
	}
	return &review, 0, nil
}

// Respond writes resp as the answer to review, with the request's UID.
// An error (an answer that cannot be encoded) has been answered with 500.
func Respond(w http.ResponseWriter, review *admissionv1.AdmissionReview, resp *admissionv1.AdmissionResponse) error {
	resp.UID = review.Request.UID
	body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
	if err != nil {
		http.Error(w, "encode the AdmissionReview response: "+err.Error(), http.StatusInternalServerError)
		return fmt.Errorf("encode the AdmissionReview response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
	return nil
}

// ServeTLS serves h over HTTPS on ln with cfg until ctx ends, then stops
// within 5 s, letting requests in progress finish. It returns the error
// that stopped the server, or nil when ctx ended.
func ServeTLS(ctx context.Context, ln net.Listener, h http.Handler, cfg *tls.Config, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         cfg,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(stop)
	<-done
	return nil
}
