package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/testkit"
)

// stack is weft running in-process on an embedded NATS server over a
// temporary copy of a configuration and its manifests.
type stack struct {
	t    testing.TB
	bus  *testkit.Bus
	env  *testkit.Env
	dir  string // the copy: weft.yaml, manifests/, out/
	cfg  *config.Config
	stop func()
}

// copyTree copies src into dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == "out" || d.Name() == ".weft" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startStack copies the example folder src (a weft.yaml plus manifests/),
// applies edit to its weft.yaml, and runs every service on it.
func startStack(t *testing.T, src string, edit func(string) string) *stack {
	return startStackWith(t, src, nil, edit, nil)
}

// startStackWith is startStack with hooks: before runs on the copy's folder
// first, after once weft.yaml is edited (both may be nil).
func startStackWith(t testing.TB, src string, before func(dir string), edit func(string) string, after func(dir string)) *stack {
	t.Helper()
	return startStackOf(t, src, before, edit, after, Services)
}

// startStackOf is startStackWith running only the given services.
func startStackOf(t testing.TB, src string, before func(dir string), edit func(string) string, after func(dir string), services []host.Service) *stack {
	t.Helper()
	s := &stack{t: t, dir: t.TempDir()}
	copyTree(t, src, s.dir)
	if before != nil {
		before(s.dir)
	}
	if edit != nil {
		p := filepath.Join(s.dir, "weft.yaml")
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(edit(string(data))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if after != nil {
		after(s.dir)
	}
	cfg, err := config.Load(filepath.Join(s.dir, "weft.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s.cfg = cfg
	s.bus = testkit.NATS(t)
	s.env = testkit.NewEnv(t, s.bus, "e2e")
	var stops []func()
	for _, sv := range services {
		stops = append(stops, testkit.Run(t, func(ctx context.Context) error { return sv.Run(ctx, s.env.Env, cfg) }))
	}
	s.stop = func() {
		for _, f := range stops {
			f()
		}
	}
	return s
}

func (s *stack) out(name string) string { return filepath.Join(s.dir, "out", name) }

func (s *stack) read(name string) string {
	data, _ := os.ReadFile(s.out(name))
	return string(data)
}

func (s *stack) reloads() int {
	return strings.Count(s.read("reloads.log"), "\n")
}

func (s *stack) writeManifest(name, content string) {
	s.t.Helper()
	p := filepath.Join(s.dir, "manifests", name)
	tmp := p + ".tmp~"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) editManifest(name, old, new string) {
	s.t.Helper()
	data, err := os.ReadFile(filepath.Join(s.dir, "manifests", name))
	if err != nil {
		s.t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(old)) {
		s.t.Fatalf("%s does not contain %q", name, old)
	}
	s.writeManifest(name, strings.Replace(string(data), old, new, 1))
}

// status reads the report from the status bucket.
func (s *stack) status() msg.StatusReport {
	s.t.Helper()
	kv, err := s.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	if err != nil {
		s.t.Fatal(err)
	}
	rep, err := msg.ReadStatus(context.Background(), kv)
	if err != nil {
		s.t.Fatal(err)
	}
	return rep
}

func (s *stack) target(name string) msg.TargetReport {
	for _, t := range s.status().Targets {
		if t.Target == name {
			return t
		}
	}
	return msg.TargetReport{Target: name}
}

// streamCount counts the messages on subject in stream.
func (s *stack) streamCount(stream, subject string) uint64 {
	s.t.Helper()
	st, err := s.bus.JS.Stream(context.Background(), stream)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		s.t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// lastMsg returns the newest message on subject.
func (s *stack) lastMsg(stream, subject string) []byte {
	s.t.Helper()
	st, err := s.bus.JS.Stream(context.Background(), stream)
	if err != nil {
		s.t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), subject)
	if err != nil {
		return nil
	}
	return m.Data
}

func haproxyCheck(t *testing.T, cfgPath string) error {
	t.Helper()
	out, err := exec.Command(testkit.HAProxy(t), "-c", "-f", cfgPath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("haproxy -c: %v: %s", err, out)
	}
	return nil
}

func waitFor(t testing.TB, what string, f func() error) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, func() error {
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

func contains(text, want string) error {
	if !strings.Contains(text, want) {
		return fmt.Errorf("%q not found", want)
	}
	return nil
}

var errNotYet = errors.New("not yet")

func loadQuickstart(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load(quickstart + "/weft.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}
