package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ImageRegistry is a real OCI registry (go-containerregistry's, the one
// `crane registry serve` runs) serving plain HTTP on a loopback port for
// one test. Container runtimes pull from a loopback registry over plain
// HTTP without being told to.
type ImageRegistry struct {
	// Host is the registry's host and port, the first part of its image
	// references: 127.0.0.1:<port>.
	Host string
	// Username and Password are what the registry demands (WithBasicAuth);
	// empty: it serves anyone.
	Username, Password string

	wrap      func(http.Handler) http.Handler
	mu        sync.Mutex
	manifests map[string]int // manifest requests by repository
}

// RegistryOption configures Registry.
type RegistryOption func(*ImageRegistry)

// WithBasicAuth makes the registry answer 401 with a Basic challenge to
// every request that does not carry these credentials, as a private
// registry does.
func WithBasicAuth(username, password string) RegistryOption {
	return func(r *ImageRegistry) { r.Username, r.Password = username, password }
}

// WithMiddleware puts wrap around the registry's handler, below the
// credential check: a test can slow, count or break requests with it.
func WithMiddleware(wrap func(next http.Handler) http.Handler) RegistryOption {
	return func(r *ImageRegistry) { r.wrap = wrap }
}

// Registry starts an OCI registry for the test on 127.0.0.1 and stops it
// when the test ends.
func Registry(t testing.TB, opts ...RegistryOption) *ImageRegistry {
	t.Helper()
	r := &ImageRegistry{manifests: map[string]int{}}
	for _, o := range opts {
		o(r)
	}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if r.wrap != nil {
		inner = r.wrap(inner)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.Username != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.Username || p != r.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="testkit registry"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		if repo, _, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/"); ok && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
			r.mu.Lock()
			r.manifests[repo]++
			r.mu.Unlock()
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// ManifestRequests counts the manifest reads (GET and HEAD) of repo so far:
// every pull reads the manifest, so a count that did not grow means that
// nothing was pulled.
func (r *ImageRegistry) ManifestRequests(repo string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.manifests[repo]
}

// TestImage is an image pushed to an ImageRegistry.
type TestImage struct {
	// Ref is the image by tag (<host>/<repo>:<tag>), Digest its manifest
	// digest (sha256:...), ByDigest the image by digest.
	Ref, Digest, ByDigest string
	// ID is the digest of its configuration, which container runtimes
	// use as the image's id.
	ID string
}

// File is one file of a test image's layer.
type File struct {
	Path    string // without a leading slash
	Content []byte
	Mode    int64 // 0: 0644
}

// Push pushes an image for the running platform (linux and this GOARCH,
// so that a runtime here takes it) with one layer per element of layers,
// tagged <host>/<repo>:<tag>, and sets cmd as its command.
func (r *ImageRegistry) Push(t testing.TB, repo, tag string, cmd []string, layers ...[]File) TestImage {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, files := range layers {
		data := tarOf(t, files)
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Cmd = slices.Clone(cmd)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.Host+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	auth := authn.Anonymous
	if r.Username != "" {
		auth = authn.FromConfig(authn.AuthConfig{Username: r.Username, Password: r.Password})
	}
	if err := remote.Write(ref, img, remote.WithAuth(auth)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	id, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return TestImage{Ref: ref.String(), Digest: digest.String(), ByDigest: r.Host + "/" + repo + "@" + digest.String(), ID: id.String()}
}

// PushPlain pushes an ordinary image: two layers, a few files in
// folders, a shell-less command.
func (r *ImageRegistry) PushPlain(t testing.TB, repo, tag string) TestImage {
	t.Helper()
	return r.Push(t, repo, tag, []string{"/bin/app"},
		[]File{
			{Path: "etc/os-release", Content: []byte("ID=testkit\n")},
			{Path: "bin/app", Content: []byte("#!/bin/app\n"), Mode: 0o755},
		},
		[]File{
			{Path: "srv/www/index.html", Content: []byte("<h1>" + repo + ":" + tag + "</h1>\n")},
			{Path: "srv/www/data.json", Content: []byte(`{"tag":"` + tag + `"}`)},
		})
}

// PushScratch pushes an image made "FROM scratch": one layer holding one
// executable file at path (a static binary, as distroless and scratch
// images hold), which is also its command.
func (r *ImageRegistry) PushScratch(t testing.TB, repo, tag, path string, content []byte) TestImage {
	t.Helper()
	path = strings.TrimPrefix(path, "/")
	return r.Push(t, repo, tag, []string{"/" + path}, []File{{Path: path, Content: content, Mode: 0o755}})
}

// tarOf makes a layer: a tar of files, with their parent folders.
func tarOf(t testing.TB, files []File) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		parts := strings.Split(f.Path, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.Path, Mode: mode, Size: int64(len(f.Content))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.Content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
