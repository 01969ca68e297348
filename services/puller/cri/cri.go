// Package cri is the puller's client of a container runtime's CRI
// ImageService (k8s.io/cri-api v1) over its unix socket: Status says
// whether the runtime has an image (the runtime is asked, never
// node.status.images, which the kubelet caps), Pull pulls one with the
// credentials a Keyring finds for it, as the kubelet does.
//
// Every error is wrapped with %w and classified: an image the registry does
// not have (ErrNotFound), credentials it refuses or a pull it does not
// allow (ErrUnauthorized), and a reference that does not parse
// (ErrInvalidReference) are permanent (IsPermanent): asking again cannot
// change them. Anything else (the runtime or the registry unreachable, a
// timeout, a registry answering 5xx or 429) may pass and is retryable.
package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Permanent errors: the registry, or the reference, says no.
var (
	ErrNotFound         = errors.New("image not found")
	ErrUnauthorized     = errors.New("registry refused the pull")
	ErrInvalidReference = errors.New("invalid image reference")
)

// IsPermanent reports an error that no retry can fix.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrInvalidReference)
}

// Client talks to one runtime's ImageService.
type Client struct {
	conn   *grpc.ClientConn
	images runtimeapi.ImageServiceClient
}

// Dial makes a client of the runtime listening on the unix socket at
// path (containerd: /run/containerd/containerd.sock). It connects lazily:
// a runtime not up yet is a retryable error of the first call.
func Dial(path string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+strings.TrimPrefix(path, "unix://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("cri: dial %s: %w", path, err)
	}
	return &Client{conn: conn, images: runtimeapi.NewImageServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Ping asks the runtime's ImageService about its image file systems: an
// error means it does not answer (a readiness check).
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.images.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}); err != nil {
		return fmt.Errorf("cri: the runtime does not answer: %w", classify(err))
	}
	return nil
}

// Image is what the runtime reports of an image it has.
type Image struct {
	ID          string   // the runtime's id (sha256 of the configuration)
	RepoTags    []string // references by tag it is known by
	RepoDigests []string // references by digest (name@sha256:...)
	Size        uint64   // bytes
}

// Status returns the runtime's image for ref and whether it has one.
func (c *Client) Status(ctx context.Context, ref string) (Image, bool, error) {
	resp, err := c.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return Image{}, false, fmt.Errorf("cri: image status of %s: %w", ref, classify(err))
	}
	img := resp.GetImage()
	if img == nil || img.GetId() == "" {
		return Image{}, false, nil
	}
	return Image{ID: img.GetId(), RepoTags: img.GetRepoTags(), RepoDigests: img.GetRepoDigests(), Size: img.GetSize()}, true, nil
}

// Pull pulls ref with auth (nil: anonymously) and returns the runtime's
// id of the image.
func (c *Client) Pull(ctx context.Context, ref string, auth *Auth) (string, error) {
	req := &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}
	if auth != nil {
		req.Auth = &runtimeapi.AuthConfig{
			Username: auth.Username, Password: auth.Password, Auth: auth.Auth,
			ServerAddress: auth.ServerAddress, IdentityToken: auth.IdentityToken, RegistryToken: auth.RegistryToken,
		}
	}
	resp, err := c.images.PullImage(ctx, req)
	if err != nil {
		return "", fmt.Errorf("cri: pull %s: %w", ref, classify(err))
	}
	return resp.GetImageRef(), nil
}

// classify wraps a runtime's error with the sentinel it amounts to,
// keeping its text (the registry's message). Runtimes give most pull
// failures the code Unknown, so the text decides where the code does not.
func classify(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	var kind error
	switch st.Code() {
	case codes.NotFound:
		kind = ErrNotFound
	case codes.PermissionDenied, codes.Unauthenticated:
		kind = ErrUnauthorized
	case codes.InvalidArgument:
		kind = ErrInvalidReference
	case codes.Unknown:
		kind = fromText(msg)
	}
	if kind == nil {
		// Unavailable, DeadlineExceeded, Canceled, ResourceExhausted,
		// Internal, and Unknown texts not known as final: retryable.
		return fmt.Errorf("%s (%s)", msg, st.Code())
	}
	return fmt.Errorf("%w: %s", kind, msg)
}

// fromText reads the sentinel from a runtime's error text (containerd's:
// "... failed with status code [manifests 2]: 401 Unauthorized", "...: not
// found", "failed to parse reference ...").
func fromText(msg string) error {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "429 too many requests") || strings.Contains(m, "toomanyrequests"):
		return nil // rate limited: retryable
	case strings.Contains(m, "401 unauthorized") || strings.Contains(m, "403 forbidden") ||
		strings.Contains(m, "unauthorized:") || strings.Contains(m, "denied:") ||
		strings.Contains(m, "authorization failed") || strings.Contains(m, "no basic auth credentials"):
		return ErrUnauthorized
	case strings.HasSuffix(m, ": not found") || strings.Contains(m, "manifest unknown") || strings.Contains(m, "name unknown"):
		return ErrNotFound
	case (strings.Contains(m, "failed to parse") && strings.Contains(m, "reference")) || strings.Contains(m, "invalid reference format"):
		return ErrInvalidReference
	}
	return nil
}
