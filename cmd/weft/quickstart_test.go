package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// metric sums the counters (or histogram sample counts) of family name whose
// labels include every given label.
func (s *stack) metric(name string, labels ...string) float64 {
	s.t.Helper()
	families, err := s.env.Registry.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func TestQuickstartEndToEnd(t *testing.T) {
	s := startStack(t, "../../examples/quickstart", nil)
	waitFor(t, "first deploy", func() error {
		if err := contains(s.read("haproxy.cfg"), "server web-2 127.0.0.2:8080"); err != nil {
			return err
		}
		return contains(s.read("maps/prefix.map"), "shop.example.com/api be_default_api_http")
	})
	if err := haproxyCheck(t, s.out("haproxy.cfg")); err != nil {
		t.Fatal(err)
	}
	cfg := s.read("haproxy.cfg")
	for _, want := range []string{"backend be_default_web_80", "backend be_default_api_http", "backend be_blog_blog_80", "server api-1 127.0.0.3:9000"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("haproxy.cfg lacks %q", want)
		}
	}
	for _, unwanted := range []string{"other.example.com", "127.0.0.4"} { // another class; a pod not ready
		if strings.Contains(cfg+s.read("maps/hosts.map"), unwanted) {
			t.Errorf("output holds %q", unwanted)
		}
	}
	waitFor(t, "deploy status", func() error {
		tr := s.target("quickstart")
		if len(tr.Deploys) != 1 || tr.Deploys[0].Version == 0 || tr.Validation == nil || !tr.Validation.OK {
			return fmt.Errorf("status %+v", tr)
		}
		return nil
	})
	if n := s.reloads(); n != 1 {
		t.Fatalf("reloads after the first deploy = %d, want 1", n)
	}

	t.Run("a manifest edit changes the output", func(t *testing.T) {
		s.editManifest("endpoints.yaml", `"127.0.0.2"`, `"127.0.0.9"`)
		waitFor(t, "new address deployed", func() error { return contains(s.read("haproxy.cfg"), "server web-2 127.0.0.9:8080") })
		if err := haproxyCheck(t, s.out("haproxy.cfg")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "one more reload", func() error {
			if n := s.reloads(); n != 2 {
				return fmt.Errorf("reloads = %d, want 2", n)
			}
			return nil
		})
	})

	t.Run("an edit that renders the same output changes nothing", func(t *testing.T) {
		before := s.read("haproxy.cfg")
		renders := s.streamCount(msg.StreamRenders, msg.RenderSubject("quickstart"))
		changes := s.streamCount(msg.StreamChanges, msg.ChangeSubject("manifests", "services"))
		unchanged := s.metric("weft_renderer_renders_total", "target", "quickstart", "outcome", "unchanged")
		// An annotation the templates never read: the object changes, the output does not.
		s.editManifest("shop.yaml", "  name: web\n  namespace: default\n", "  name: web\n  namespace: default\n  annotations:\n    team: storefront\n")
		waitFor(t, "change announced", func() error {
			if n := s.streamCount(msg.StreamChanges, msg.ChangeSubject("manifests", "services")); n != changes+1 {
				return fmt.Errorf("service changes = %d, want %d", n, changes+1)
			}
			return nil
		})
		waitFor(t, "render found nothing new", func() error {
			if s.metric("weft_renderer_renders_total", "target", "quickstart", "outcome", "unchanged") <= unchanged {
				return errNotYet
			}
			return nil
		})
		if n := s.streamCount(msg.StreamRenders, msg.RenderSubject("quickstart")); n != renders {
			t.Errorf("render messages = %d, want %d (nothing new to publish)", n, renders)
		}
		if s.read("haproxy.cfg") != before {
			t.Error("haproxy.cfg changed")
		}
		if n := s.reloads(); n != 2 {
			t.Errorf("reloads = %d, want 2", n)
		}
	})

	t.Run("an edit of comments only is dropped by the watcher", func(t *testing.T) {
		changes := s.streamCount(msg.StreamChanges, msg.ChangeAll)
		applies := s.metric("weft_watcher_apply_duration_seconds", "source", "manifests")
		s.editManifest("shop.yaml", "# The shop", "# The shop (comment edited)")
		waitFor(t, "watcher re-read the folder", func() error {
			if s.metric("weft_watcher_apply_duration_seconds", "source", "manifests") <= applies {
				return errNotYet
			}
			return nil
		})
		if n := s.streamCount(msg.StreamChanges, msg.ChangeAll); n != changes {
			t.Errorf("change messages = %d, want %d", n, changes)
		}
	})
}
