package cri

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClassify covers the answers of runtimes other than the containerd
// the tests run (CRI-O, newer containerd releases), which word the same
// failures differently.
func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		code codes.Code
		msg  string
		want error // nil: retryable
	}{
		{"not found code", codes.NotFound, "pull image: r/a:1: not found", ErrNotFound},
		{"not found text", codes.Unknown, `failed to resolve reference "r/a:1": r/a:1: not found`, ErrNotFound},
		{"manifest unknown", codes.Unknown, "reading manifest 1 in r/a: manifest unknown: manifest unknown", ErrNotFound},
		{"401", codes.Unknown, "failed with status code [manifests 1]: 401 Unauthorized", ErrUnauthorized},
		{"403", codes.Unknown, "unexpected status from HEAD request to https://r/v2/a/manifests/1: 403 Forbidden", ErrUnauthorized},
		{"denied", codes.Unknown, "reading manifest 1 in r/a: denied: requested access to the resource is denied", ErrUnauthorized},
		{"unauthenticated code", codes.Unauthenticated, "no credentials", ErrUnauthorized},
		{"invalid argument", codes.InvalidArgument, "invalid reference", ErrInvalidReference},
		{"parse", codes.Unknown, `failed to parse image reference "A B"`, ErrInvalidReference},
		{"rate limited", codes.Unknown, "failed with status code [manifests 1]: 429 Too Many Requests - toomanyrequests: slow down", nil},
		{"registry down", codes.Unknown, "dial tcp 10.0.0.1:443: connect: connection refused", nil},
		{"registry 500", codes.Unknown, "unexpected status from GET request: 500 Internal Server Error", nil},
		{"runtime down", codes.Unavailable, "connection error", nil},
		{"deadline", codes.DeadlineExceeded, "context deadline exceeded", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := classify(status.Error(tc.code, tc.msg))
			if tc.want == nil {
				if IsPermanent(err) {
					t.Fatalf("%v is permanent, want retryable", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !IsPermanent(err) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
	plain := errors.New("not a status")
	if got := classify(plain); got != plain || IsPermanent(got) {
		t.Fatalf("a non-gRPC error: %v", got)
	}
}
