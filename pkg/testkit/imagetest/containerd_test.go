package imagetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/weftio/weft/pkg/testkit/imagetest"
)

// TestContainerdPullsFromRegistry: the test containerd pulls the test
// registry's images through its CRI ImageService, by tag and by digest,
// and a registry that demands credentials refuses a pull without them.
func TestContainerdPullsFromRegistry(t *testing.T) {
	sock := imagetest.Containerd(t)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	images := runtimeapi.NewImageServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	open := imagetest.Registry(t)
	private := imagetest.Registry(t, imagetest.WithBasicAuth("puller", "s3cret"))
	plain := open.PushPlain(t, "shop/web", "1.0")
	scratch := open.PushScratch(t, "tools/noop", "1", "/noop", []byte("\x7fELF not really"))
	secret := private.PushPlain(t, "team/app", "2")

	cases := []struct {
		name    string
		image   string
		auth    *runtimeapi.AuthConfig
		wantID  string
		wantErr string
	}{
		{"plain by tag", plain.Ref, nil, plain.ID, ""},
		{"scratch by digest", scratch.ByDigest, nil, scratch.ID, ""},
		{"private with credentials", secret.Ref, &runtimeapi.AuthConfig{Username: "puller", Password: "s3cret"}, secret.ID, ""},
		{"private without credentials", secret.Ref, nil, "", "401 Unauthorized"},
		{"private with wrong credentials", secret.Ref, &runtimeapi.AuthConfig{Username: "puller", Password: "nope"}, "", "401 Unauthorized"},
		{"missing image", open.Host + "/shop/none:1", nil, "", "not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: tc.image}, Auth: tc.auth})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("pull %s: %v, want an error saying %q", tc.image, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("pull %s: %v", tc.image, err)
			}
			if resp.ImageRef != tc.wantID {
				t.Fatalf("image ref %q, want the image's id %q", resp.ImageRef, tc.wantID)
			}
			st, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: tc.image}})
			if err != nil || st.Image == nil || st.Image.Id != tc.wantID || st.Image.Size == 0 {
				t.Fatalf("image status of %s: %v %v", tc.image, st, err)
			}
		})
	}
	if n := open.ManifestRequests("shop/web"); n == 0 {
		t.Fatal("the registry counted no manifest request of shop/web")
	}
}
