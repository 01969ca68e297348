package deployer_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// TestTriggerDeploysLastAccepted: weft.trigger.deploy.<target> delivers the
// last bundle the validator accepted, not the one deployed last (here a
// newer bundle was accepted while its orders never came).
func TestTriggerDeploysLastAccepted(t *testing.T) {
	f := start(t)
	b1, b2 := f.store("global # one\n"), f.store("global # two\n")
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b1.Hash, OK: true})
	if d := f.outcome(1); d.Outcome != msg.OutcomeApplied {
		t.Fatalf("first deploy: %+v", d)
	}
	// v2 accepted (recorded as the validator does), its orders never came.
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: true})
	testkit.Eventually(t, 5*time.Second, func() error {
		_, err := f.bus.NC.Request(msg.TriggerDeploySubject("edge"), nil, 2*time.Second)
		return err
	})
	d := f.outcome(2)
	if d.Outcome != msg.OutcomeApplied || d.Version != 2 || d.BundleHash != b2.Hash || f.file("haproxy.cfg") != "global # two\n" {
		t.Fatalf("re-deploy: outcome %+v, haproxy.cfg %q; want the last accepted bundle", d, f.file("haproxy.cfg"))
	}
	// The outcome is published before the status is written.
	testkit.Eventually(t, 15*time.Second, func() error {
		if st := f.deployStatus(); st.Version != 2 || st.BundleHash != b2.Hash {
			return fmt.Errorf("status after the re-deploy = %+v", st)
		}
		return nil
	})
}

// TestStartRepairsInstance: a deployer starting on an instance whose status
// says it is up to date compares the instance with the last accepted bundle
// through the ordinary apply path, and repairs what changed while no
// deployer ran.
func TestStartRepairsInstance(t *testing.T) {
	const yaml = `
targets:
  edge:
    deploy: {driver: files, dest: out, reload_cmd: echo reload >> ../reloads.log}
    haproxy_config: {template: unused}
`
	tests := []struct {
		name    string
		change  func(t *testing.T, dest string)
		outcome string
		reloads int
	}{
		{"folder removed", func(t *testing.T, dest string) {
			if err := os.RemoveAll(dest); err != nil {
				t.Fatal(err)
			}
		}, msg.OutcomeApplied, 2},
		{"file edited", func(t *testing.T, dest string) {
			if err := os.WriteFile(filepath.Join(dest, "maps", "host.map"), []byte("edited\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, msg.OutcomeApplied, 2},
		{"nothing changed", func(*testing.T, string) {}, msg.OutcomeUnchanged, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bus := testkit.NATS(t)
			f, stop := run(t, bus, dir, filepath.Join(dir, "out"), yaml)
			b := f.store("global # one\n")
			f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})
			if d := f.outcome(1); d.Outcome != msg.OutcomeApplied || f.reloads() != 1 {
				t.Fatalf("first deploy: %+v after %d reloads", d, f.reloads())
			}
			stop()

			tt.change(t, f.dest)
			f, _ = run(t, bus, dir, f.dest, yaml)
			d := f.outcome(2)
			if d.Outcome != tt.outcome || d.Version != 1 || f.reloads() != tt.reloads {
				t.Fatalf("after the restart: outcome %+v after %d reloads, want %s after %d", d, f.reloads(), tt.outcome, tt.reloads)
			}
			if f.file("haproxy.cfg") != "global # one\n" || f.file("maps/host.map") != "a b\n" {
				t.Fatalf("files after the restart: %q %q", f.file("haproxy.cfg"), f.file("maps/host.map"))
			}
			// The status is written right after the outcome is published.
			testkit.Eventually(t, 5*time.Second, func() error {
				if st := f.deployStatus(); st.Version != 1 || st.Deploys != 2 || st.LastError != "" {
					return fmt.Errorf("status after the restart = %+v", st)
				}
				return nil
			})
		})
	}
}

// TestKeyMaterialIsDeliveredPrivate: every certificate and every file
// holding a private key is written 0600, or with the configured mode when
// that gives others nothing; the other files with the configured mode.
func TestKeyMaterialIsDeliveredPrivate(t *testing.T) {
	tests := []struct {
		name          string
		mode          string
		other, secret fs.FileMode
	}{
		{"default", "", 0o644, 0o600},
		{"world-readable mode", "mode: \"0644\"", 0o644, 0o600},
		{"group-readable mode", "mode: \"0640\"", 0o640, 0o640},
		{"private mode", "mode: \"0600\"", 0o600, 0o600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			f, _ := run(t, testkit.NATS(t), dir, filepath.Join(dir, "out"), `
targets:
  edge:
    deploy: {driver: files, dest: out, `+tt.mode+`}
    haproxy_config: {template: unused}
`)
			b, err := msg.NewBundle("edge", f.dest, "haproxy.cfg", []msg.BundleFile{
				{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte("global\n")},
				{Path: "certs/site.pem", Kind: msg.FileCert, Content: []byte("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\ny\n-----END EC PRIVATE KEY-----\n")},
				{Path: "certs/ca.pem", Kind: msg.FileCert, Content: []byte("-----BEGIN CERTIFICATE-----\nz\n-----END CERTIFICATE-----\n")},
				{Path: "files/key.pem", Kind: msg.FileFile, Content: []byte("-----BEGIN PRIVATE KEY-----\nk\n-----END PRIVATE KEY-----\n")},
				{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte("a b\n")},
			})
			if err != nil {
				t.Fatal(err)
			}
			f.put(b)
			f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})
			if d := f.outcome(1); d.Outcome != msg.OutcomeApplied {
				t.Fatalf("deploy: %+v", d)
			}
			for _, bf := range b.Files {
				fi, err := os.Stat(filepath.Join(f.dest, bf.Path))
				if err != nil {
					t.Fatal(err)
				}
				want := tt.other
				if bf.Secret() {
					want = tt.secret
				}
				if fi.Mode().Perm() != want {
					t.Errorf("%s (%s) mode = %v, want %v", bf.Path, bf.Kind, fi.Mode().Perm(), want)
				}
			}
		})
	}
}
