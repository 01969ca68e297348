package cri_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit/imagetest"
	"github.com/weftio/weft/services/puller/cri"
)

// TestClientAgainstContainerd pulls through a real containerd from a real
// registry: Status before and after, credentials, and each failure's class.
func TestClientAgainstContainerd(t *testing.T) {
	c, err := cri.Dial(imagetest.Containerd(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := imagetest.Registry(t)
	private := imagetest.Registry(t, imagetest.WithBasicAuth("puller", "s3cret"))
	plain := open.PushPlain(t, "shop/web", "1.0")
	secret := private.PushPlain(t, "team/app", "2")

	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if _, ok, err := c.Status(ctx, plain.Ref); err != nil || ok {
		t.Fatalf("status before the pull: present %v, %v", ok, err)
	}
	ref, err := c.Pull(ctx, plain.Ref, nil)
	if err != nil || ref != plain.ID {
		t.Fatalf("pull: %q %v, want %s", ref, err, plain.ID)
	}
	img, ok, err := c.Status(ctx, plain.Ref)
	if err != nil || !ok || img.ID != plain.ID || img.Size == 0 || len(img.RepoDigests) != 1 || !strings.HasSuffix(img.RepoDigests[0], plain.Digest) {
		t.Fatalf("status after the pull: %+v %v %v", img, ok, err)
	}
	if _, err := c.Pull(ctx, secret.Ref, &cri.Auth{Username: "puller", Password: "s3cret"}); err != nil {
		t.Fatalf("private pull with credentials: %v", err)
	}

	cases := []struct {
		name  string
		image string
		auth  *cri.Auth
		want  error
		text  string
	}{
		{"missing image", open.Host + "/shop/none:1", nil, cri.ErrNotFound, "not found"},
		{"no credentials", private.Host + "/team/app:2", nil, cri.ErrUnauthorized, "401 Unauthorized"},
		{"wrong credentials", private.Host + "/team/app:2", &cri.Auth{Username: "puller", Password: "x"}, cri.ErrUnauthorized, "401 Unauthorized"},
		{"bad reference", "Not A Reference", nil, cri.ErrInvalidReference, "Not A Reference"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The private image is on the runtime by now: a pull asks
			// the registry all the same, and is refused.
			_, err := c.Pull(ctx, tc.image, tc.auth)
			if !errors.Is(err, tc.want) || !cri.IsPermanent(err) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("pull %s: %v, want %v saying %q", tc.image, err, tc.want, tc.text)
			}
		})
	}
}

// TestClientRuntimeDown: a runtime that does not answer is a retryable
// error, not an answer.
func TestClientRuntimeDown(t *testing.T) {
	c, err := cri.Dial(filepath.Join(t.TempDir(), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"status": func() error { _, _, err := c.Status(ctx, "r.example.com/a:1"); return err },
		"pull":   func() error { _, err := c.Pull(ctx, "r.example.com/a:1", nil); return err },
		"ping":   func() error { return c.Ping(ctx) },
	} {
		err := call()
		if err == nil || cri.IsPermanent(err) || !strings.Contains(err.Error(), "Unavailable") {
			t.Fatalf("%s with no runtime: %v, want a retryable error", name, err)
		}
	}
}
