package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

const quickstart = "../../examples/quickstart"

// deployedOnce starts the quickstart with edit applied to weft.yaml and waits
// for its first deploy.
func deployedOnce(t *testing.T, edit func(string) string) *stack {
	s := startStack(t, quickstart, edit)
	waitFor(t, "first deploy", func() error {
		if d := s.target("quickstart").Deploys; len(d) == 0 || d[0].Version == 0 {
			return errNotYet
		}
		return contains(s.read("haproxy.cfg"), "backend be_default_web_80")
	})
	return s
}

func TestBrokenTemplateDeploysNothing(t *testing.T) {
	s := startStack(t, quickstart, func(y string) string {
		return strings.Replace(y, "# <host><path> -> backend, matched exactly", "# broken {% if %}", 1)
	})
	waitFor(t, "render failure in status", func() error {
		r := s.target("quickstart").Render
		if r == nil {
			return errNotYet
		}
		return contains(r.LastError, `template "exact.map" line 1`)
	})
	var r msg.Render
	if err := msg.Decode(s.lastMsg(msg.StreamRenders, msg.RenderSubject("quickstart")), &r); err != nil {
		t.Fatalf("render message: %v", err)
	}
	if r.Failure == nil || r.Failure.Template != "exact.map" || r.BundleHash != "" {
		t.Fatalf("render message = %+v, want a failure naming exact.map", r)
	}
	if err := contains(s.env.Logs.String(), "render failed"); err != nil {
		t.Error("log:", err)
	}
	if s.read("haproxy.cfg") != "" {
		t.Fatal("a target whose template does not compile deployed something")
	}
}

func TestObjectThatBreaksTemplateKeepsLastGood(t *testing.T) {
	s := deployedOnce(t, func(y string) string {
		// A line that fails for an Ingress rule without a host.
		return strings.Replace(y, "        backend be_not_found\n",
			"        {%- for _, i in resources.ingresses.items() %}\n        # {{ i.spec.rules[0].host.upper() }}\n        {%- endfor %}\n        backend be_not_found\n", 1)
	})
	good := s.read("haproxy.cfg")
	s.writeManifest("hostless.yaml", `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: hostless
  namespace: default
spec:
  ingressClassName: weft
  rules:
    - http:
        paths:
          - path: /x
            pathType: Prefix
            backend:
              service:
                name: web
                port:
                  number: 80
`)
	waitFor(t, "render failure in status", func() error {
		r := s.target("quickstart").Render
		if r == nil {
			return errNotYet
		}
		return contains(r.LastError, "haproxy.cfg")
	})
	if s.read("haproxy.cfg") != good {
		t.Fatal("the last good haproxy.cfg was replaced")
	}
	s.editManifest("hostless.yaml", "    - http:", "    - host: fixed.example.com\n      http:")
	waitFor(t, "recovered", func() error { return contains(s.read("haproxy.cfg"), "# FIXED.EXAMPLE.COM") })
	if r := s.target("quickstart").Render; r == nil || r.LastError != "" {
		t.Fatalf("render status still has an error: %+v", r)
	}
}

func TestUnparseableManifestKeepsObjects(t *testing.T) {
	s := deployedOnce(t, nil)
	good := s.read("haproxy.cfg")
	changes := s.streamCount(msg.StreamChanges, msg.ChangeAll)
	s.editManifest("endpoints.yaml", "addressType: IPv4\nports:\n  - name: http\n    port: 8080", "addressType: IPv4\nports:\n  - name: http\n   port: [8080")
	waitFor(t, "error in sync status", func() error {
		for _, sy := range s.status().Syncs {
			if strings.Contains(strings.Join(sy.Errors, " "), "endpoints.yaml") {
				return nil
			}
		}
		return errNotYet
	})
	if n := s.streamCount(msg.StreamChanges, msg.ChangeAll); n != changes {
		t.Fatalf("a broken file produced %d change messages", n-changes)
	}
	if s.read("haproxy.cfg") != good {
		t.Fatal("output changed although nothing valid changed")
	}
	if err := contains(s.env.Logs.String(), "source problem"); err != nil {
		t.Error("log:", err)
	}
	// Other files still flow.
	s.editManifest("shop.yaml", "number: 80", "number: 8000")
	waitFor(t, "later edit deployed", func() error { return contains(s.read("haproxy.cfg"), "backend be_default_web_8000") })
}

func TestInvalidBundleIsNeverDeployed(t *testing.T) {
	s := deployedOnce(t, func(y string) string {
		// Let an annotation inject a raw line into the frontend.
		return strings.Replace(y, "          default_backend be_not_found\n",
			"          default_backend be_not_found\n        {%- for _, i in resources.ingresses.items() %}\n          {{ i.metadata.annotations['weft.io/raw'] | default('') }}\n        {%- endfor %}\n", 1)
	})
	good := s.read("haproxy.cfg")
	reloads := s.reloads()
	s.editManifest("shop.yaml", "  name: shop\n  namespace: default\n", "  name: shop\n  namespace: default\n  annotations:\n    weft.io/raw: bogus-directive on\n")
	waitFor(t, "refusal in status", func() error {
		v := s.target("quickstart").Validation
		if v == nil || v.OK {
			return errNotYet
		}
		if err := contains(v.Reason, "haproxy refused"); err != nil {
			return err
		}
		for _, p := range v.Problems {
			if p.File == "haproxy.cfg" && p.Line > 0 && strings.Contains(p.Message, "bogus-directive") {
				return nil
			}
		}
		return fmt.Errorf("no problem locating bogus-directive in %+v", v.Problems)
	})
	var v msg.Validated
	if err := msg.Decode(s.lastMsg(msg.StreamValidated, msg.ValidatedSubject("quickstart")), &v); err != nil || v.OK {
		t.Fatalf("verdict message = %+v, %v", v, err)
	}
	if s.read("haproxy.cfg") != good || s.reloads() != reloads {
		t.Fatal("a refused bundle was deployed")
	}
	if err := contains(s.env.Logs.String(), "bundle refused"); err != nil {
		t.Error("log:", err)
	}
}

// TestMalformedMessagesAreDeadLettered publishes garbage on every subject a
// service consumes: each lands in the DLQ with its reason, and the pipeline
// keeps working.
func TestMalformedMessagesAreDeadLettered(t *testing.T) {
	s := deployedOnce(t, nil)
	ctx := context.Background()
	cases := []struct {
		subject, service string
		stream           bool
	}{
		{msg.ChangeSubject("manifests", "ingresses"), "renderer", true},
		{msg.SyncSubject("manifests", "ingresses"), "renderer", true},
		{msg.RenderSubject("quickstart"), "validator", true},
		{msg.ValidatedSubject("quickstart"), "deployer", true},
		{msg.DeploySubject("quickstart", "local"), "deployer", true},
		{msg.ValidateSubject("quickstart"), "validator", false},
		{msg.TriggerRenderSubject("quickstart"), "renderer", false},
		{msg.TriggerDeploySubject("quickstart"), "deployer", false},
		{msg.TriggerResyncSubject("manifests"), "watcher", false},
		{msg.TriggerRenderSubject("no-such-target"), "renderer", false},
	}
	for _, tc := range cases {
		t.Run(tc.subject, func(t *testing.T) {
			before := s.streamCount(msg.StreamDLQ, msg.DLQSubject(tc.service))
			payload := []byte(`{"schema":"weft.nonsense.v1"`)
			if strings.Contains(tc.subject, "no-such-target") {
				payload = nil // well-formed, but names no target
			}
			var err error
			if tc.stream {
				_, err = s.bus.JS.Publish(ctx, tc.subject, payload)
			} else {
				err = s.bus.NC.Publish(tc.subject, payload)
			}
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "dead letter", func() error {
				if s.streamCount(msg.StreamDLQ, msg.DLQSubject(tc.service)) <= before {
					return errNotYet
				}
				return nil
			})
			var dl msg.DeadLetter
			if err := msg.Decode(s.lastMsg(msg.StreamDLQ, msg.DLQSubject(tc.service)), &dl); err != nil {
				t.Fatal(err)
			}
			if dl.Subject != tc.subject || dl.Reason == "" {
				t.Fatalf("dead letter = %+v", dl)
			}
		})
	}
	// Still working.
	s.editManifest("endpoints.yaml", `"127.0.0.1"`, `"127.0.0.7"`)
	waitFor(t, "deploy after garbage", func() error { return contains(s.read("haproxy.cfg"), "127.0.0.7:8080") })
	// Terminated stream messages are not redelivered.
	cons, err := s.bus.JS.Consumer(ctx, msg.StreamRenders, "validator")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumRedelivered > 0 && info.NumPending > 0 {
		t.Fatalf("validator consumer holds messages: %+v", info)
	}
	_ = jetstream.ErrKeyNotFound
}

// deadLetters returns every dead letter of service.
func (s *stack) deadLetters(service string) []msg.DeadLetter {
	s.t.Helper()
	ctx := context.Background()
	st, err := s.bus.JS.Stream(ctx, msg.StreamDLQ)
	if err != nil {
		s.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []msg.DeadLetter
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil || m.Subject != msg.DLQSubject(service) {
			continue
		}
		var dl msg.DeadLetter
		if msg.Decode(m.Data, &dl) == nil {
			out = append(out, dl)
		}
	}
	return out
}

// TestForgedMessagesWedgeNothing publishes, with the services running, a
// change, a render, a verdict and a deploy order far ahead of the real
// versions (anyone can publish on these subjects): none of them orders
// state. Each is dead-lettered by the service that consumes it with the
// reason, the next real change renders, validates and deploys at its real
// version, and the status shows that version everywhere.
func TestForgedMessagesWedgeNothing(t *testing.T) {
	s := deployedOnce(t, nil)
	ctx := context.Background()
	before := s.target("quickstart")
	hash := before.Deploys[0].BundleHash
	key := msg.ResourceKey("manifests", "endpoints", "default", "web")
	forged := []struct {
		subject, service string
		m                msg.Message
	}{
		{msg.ChangeSubject("manifests", "endpoints"), "renderer",
			&msg.Change{Source: "manifests", Type: "endpoints", Key: key, Op: msg.OpDelete, Namespace: "default", Name: "web", Revision: 99999}},
		{msg.RenderSubject("quickstart"), "validator", &msg.Render{Target: "quickstart", Version: 99999, BundleHash: hash, At: time.Now()}},
		{msg.ValidatedSubject("quickstart"), "deployer", &msg.Validated{Target: "quickstart", Version: 99999, BundleHash: hash, OK: true}},
		{msg.DeploySubject("quickstart", "local"), "deployer",
			&msg.DeployOrder{Target: "quickstart", Instance: "local", Version: 99999, BundleHash: hash, Reason: msg.OrderTrigger}},
	}
	for _, f := range forged {
		out, err := msg.NewMsg(f.subject, "", f.m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.bus.JS.PublishMsg(ctx, out); err != nil {
			t.Fatal(err)
		}
	}
	s.editManifest("endpoints.yaml", `"127.0.0.1"`, `"127.0.0.7"`)
	waitFor(t, "real change deployed at its real version", func() error {
		if err := contains(s.read("haproxy.cfg"), "127.0.0.7:8080"); err != nil {
			return err
		}
		tr := s.target("quickstart")
		if tr.Render == nil || tr.Validation == nil || len(tr.Deploys) != 1 {
			return errNotYet
		}
		v := tr.Render.Version
		if v <= before.Render.Version || v >= 99999 {
			return fmt.Errorf("render status at v%d, was v%d", v, before.Render.Version)
		}
		if val := tr.Validation; val.Version != v || !val.OK || val.LastGoodVersion != v {
			return fmt.Errorf("validation status %+v, want v%d accepted", val, v)
		}
		if d := tr.Deploys[0]; d.Version != v || d.BundleHash != tr.Render.BundleHash {
			return fmt.Errorf("deploy status at v%d %s, want v%d %s", d.Version, d.BundleHash, v, tr.Render.BundleHash)
		}
		return nil
	})
	for _, f := range forged {
		testkit.Eventually(t, 3*msg.ConfirmWait, func() error {
			for _, dl := range s.deadLetters(f.service) {
				if dl.Subject == f.subject && strings.Contains(dl.Reason, "99999") && strings.Contains(dl.Reason, msg.ErrUnconfirmed.Error()) {
					return nil
				}
			}
			return fmt.Errorf("no dead letter of %s in weft.dlq.%s: %+v", f.subject, f.service, s.deadLetters(f.service))
		})
	}
	if err := contains(s.env.Logs.String(), "message dead-lettered"); err != nil {
		t.Error("log:", err)
	}
}
