package confd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current output")

const testConfdir = "testdata/confdir"

// fakeResolver answers from fixed tables; any other name fails like an
// unknown host.
type fakeResolver struct {
	ips  map[string][]string
	srvs map[string][]*net.SRV
}

func (f fakeResolver) LookupIP(_ context.Context, network, host string) ([]net.IP, error) {
	if network != "ip" {
		return nil, errors.New("unexpected network " + network)
	}
	addrs, ok := f.ips[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]net.IP, len(addrs))
	for i, a := range addrs {
		out[i] = net.ParseIP(a)
	}
	return out, nil
}

func (f fakeResolver) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	recs, ok := f.srvs["_"+service+"._"+proto+"."+name]
	if !ok {
		return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	out := make([]*net.SRV, len(recs))
	for i, r := range recs {
		c := *r
		out[i] = &c
	}
	return "", out, nil
}

var testResolver = fakeResolver{
	ips: map[string][]string{
		// Deliberately unsorted: lookupIP sorts the text.
		"db.internal":     {"10.0.0.9", "::1", "10.0.0.10", "2001:db8::1"},
		"v4only.internal": {"192.0.2.1"},
	},
	srvs: map[string][]*net.SRV{
		"_http._tcp.web.internal": {
			{Target: "web2.internal.", Port: 8080, Priority: 10, Weight: 5},
			{Target: "web1.internal.", Port: 80, Priority: 20, Weight: 1},
			{Target: "web1.internal.", Port: 443, Priority: 10, Weight: 1},
		},
	},
}

var testEnv = map[string]string{"WEFT_TEST_HOME": "/home/weft", "WEFT_TEST_EMPTY": ""}

var testClock = time.Date(2024, 3, 9, 17, 4, 5, 0, time.FixedZone("CET", 3600))

// testOptions make every environment-dependent function deterministic.
func testOptions() []Option {
	return []Option{
		WithResolver(testResolver),
		WithGetenv(func(k string) string { return testEnv[k] }),
		WithClock(func() time.Time { return testClock }),
		WithHostname(func() (string, error) { return "confd-host", nil }),
	}
}

func loadValues(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile("testdata/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]string
	if err := yaml.UnmarshalStrict(b, &v); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	return v
}

func loadTestConfdir(t testing.TB, opts ...Option) []Resource {
	t.Helper()
	rs, err := LoadConfdir(testConfdir, append(testOptions(), opts...)...)
	if err != nil {
		t.Fatalf("LoadConfdir: %v", err)
	}
	return rs
}

// goldenName is the resource's conf.d path without ".toml".
func goldenName(t testing.TB, r Resource) string {
	t.Helper()
	rel, err := filepath.Rel(filepath.Join(testConfdir, "conf.d"), r.File)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(rel, ".toml")
}

func TestGolden(t *testing.T) {
	values := loadValues(t)
	rs := loadTestConfdir(t)
	want := []string{"all", "env", "math", "noprefix", "sort", "store", "strings", "sub/nested", "utility"}
	var got []string
	for _, r := range rs {
		got = append(got, goldenName(t, r))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("resources in lexical order: got %v, want %v", got, want)
	}
	for _, r := range rs {
		name := goldenName(t, r)
		t.Run(name, func(t *testing.T) {
			out, err := r.Render(values)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			golden := filepath.Join("testdata", "golden", name+".out")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			wantOut, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(out, wantOut) {
				t.Errorf("%s differs from %s\n--- got ---\n%s\n--- want ---\n%s", r.Template, golden, out, wantOut)
			}
		})
	}
}

// TestGoldenStable renders every resource many times: map iteration in
// the store must never show in the output.
func TestGoldenStable(t *testing.T) {
	values := loadValues(t)
	for _, r := range loadTestConfdir(t) {
		first, err := r.Render(values)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			out, err := r.Render(values)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, first) {
				t.Fatalf("%s: output changed between renders:\n%s\n---\n%s", r.File, first, out)
			}
		}
	}
}

// TestRenderConcurrent renders copies of the same resources from many
// goroutines (run with -race).
func TestRenderConcurrent(t *testing.T) {
	values := loadValues(t)
	rs := loadTestConfdir(t)
	want := make([][]byte, len(rs))
	for i, r := range rs {
		out, err := r.Render(values)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = out
	}
	errs := make(chan error, 8*len(rs))
	for range 8 {
		for i, r := range rs {
			go func() {
				out, err := r.Render(values)
				if err == nil && !bytes.Equal(out, want[i]) {
					err = errors.New(r.File + ": concurrent render differs")
				}
				errs <- err
			}()
		}
	}
	for range 8 * len(rs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestFixturesUseEveryFunction keeps the golden fixtures complete: every
// function a template can call appears in one of them.
func TestFixturesUseEveryFunction(t *testing.T) {
	var all strings.Builder
	err := filepath.WalkDir(filepath.Join(testConfdir, "templates"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		all.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	text := all.String()
	names := []string{"index"}
	for name := range staticFuncs(&settings{}) {
		names = append(names, name)
	}
	for name := range boundFuncs(context.Background(), NewStore(), nil, &includer{}) {
		names = append(names, name)
	}
	for _, name := range names {
		found := false
		for _, lead := range []string{"{{", "(", "| ", "{{$", " "} {
			if strings.Contains(text, lead+name+" ") || strings.Contains(text, lead+name+"}}") || strings.Contains(text, lead+name+")") || strings.Contains(text, lead+name+".") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no fixture template calls %s", name)
		}
	}
}
