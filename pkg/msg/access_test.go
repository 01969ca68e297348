package msg_test

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// TestReadmeAccess keeps the README's table of NATS roles equal to
// AccessMarkdown. Run with -update-readme to regenerate it.
func TestReadmeAccess(t *testing.T) {
	const path = "../../README.md"
	const start, end = "<!-- access:start -->\n", "<!-- access:end -->"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i, j := strings.Index(s, start), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %q ... %q section", strings.TrimSpace(start), end)
	}
	want := msg.AccessMarkdown()
	if got := s[i+len(start) : j]; got != want {
		if *updateReadme {
			if err := os.WriteFile(path, []byte(s[:i+len(start)]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("README.md's role table differs from pkg/msg; run: go test ./pkg/msg -run TestReadmeAccess -update-readme\n got:\n%s\nwant:\n%s", got, want)
	}
}

// TestPermissions checks chosen entries of the generated allow lists: what
// a role must be allowed, and what it must not.
func TestPermissions(t *testing.T) {
	tests := []struct {
		role          msg.Role
		pub, notPub   []string
		sub, notSub   []string
		allEverything bool
	}{
		{role: msg.RoleValidator,
			pub: []string{
				"weft.validated.>",
				"$JS.API.CONSUMER.CREATE.WEFT_RENDERS.validator.weft.render.>",
				"$JS.API.CONSUMER.MSG.NEXT.WEFT_RENDERS.validator",
				"$JS.ACK.WEFT_RENDERS.validator.>",
				"$KV.weft-status.validate.*",
				"$KV.weft-leases.kind.>",
				"$JS.API.STREAM.MSG.GET.OBJ_weft-bundles",
			},
			notPub: []string{"weft.render.>", "weft.deploy.>", "$KV.weft-status.render.*", "$O.weft-bundles.C.>" + "x"},
			sub:    []string{"weft.validate.*", msg.Inbox},
		},
		{role: msg.RoleRenderer,
			pub: []string{
				"weft.render.>",
				"$JS.API.CONSUMER.CREATE.WEFT_CHANGES.*", // two filters: none in the subject
				"$JS.API.CONSUMER.DELETE.WEFT_CHANGES.*",
				"$O.weft-bundles.C.>", "$O.weft-bundles.M.>",
				"$KV.weft-leases.render.*",
			},
			notPub: []string{"$KV.weft-resources.>", "weft.validated.>", "$JS.API.STREAM.CREATE.WEFT_RENDERS"},
		},
		{role: msg.RoleWatcher,
			pub:    []string{"weft.change.>", "$KV.weft-resources.>", "$KV.weft-status.sync.*.*", "$JS.API.CONSUMER.CREATE.KV_weft-resources.watcher-relay"},
			notPub: []string{"weft.deploy.>", "$KV.weft-status.deploy.*.*", "$KV.weft-status.>"},
			sub:    []string{"weft.api.fetch.*", "weft.trigger.resync.*"},
		},
		{role: msg.RoleAuditor,
			sub:    []string{"weft.>", msg.Inbox},
			notPub: []string{"weft.>", msg.Inbox},
		},
		{role: msg.RoleProvisioner,
			pub:    []string{"$JS.API.STREAM.CREATE.WEFT_RENDERS", "$JS.API.STREAM.UPDATE.KV_weft-status", "$JS.API.STREAM.CREATE.OBJ_weft-bundles"},
			notPub: []string{"weft.render.>", "$JS.API.STREAM.DELETE.WEFT_RENDERS"},
		},
		{role: msg.RoleAdmin, allEverything: true},
	}
	for _, tt := range tests {
		t.Run(string(tt.role), func(t *testing.T) {
			a, err := msg.AccessOf(tt.role)
			if err != nil {
				t.Fatal(err)
			}
			p := a.Permissions()
			if tt.allEverything {
				if !slices.Equal(p.Publish, []string{">"}) || !slices.Equal(p.Subscribe, []string{">"}) {
					t.Fatalf("admin: %+v", p)
				}
				return
			}
			for _, s := range tt.pub {
				if !slices.Contains(p.Publish, s) {
					t.Errorf("may not publish %s", s)
				}
			}
			for _, s := range tt.notPub {
				if slices.Contains(p.Publish, s) {
					t.Errorf("may publish %s", s)
				}
			}
			for _, s := range tt.sub {
				if !slices.Contains(p.Subscribe, s) {
					t.Errorf("may not subscribe %s", s)
				}
			}
			for _, s := range tt.notSub {
				if slices.Contains(p.Subscribe, s) {
					t.Errorf("may subscribe %s", s)
				}
			}
		})
	}
}

// TestAuditorWritesNothing: no subject the auditor may publish is a weft
// subject, a bucket or store write, or a JetStream API call that changes
// anything but its own ordered consumers; it may ask the read-only
// queries (history, diff), not a rollback or unpin.
func TestAuditorWritesNothing(t *testing.T) {
	a, err := msg.AccessOf(msg.RoleAuditor)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range a.Permissions().Publish {
		ok := strings.HasPrefix(s, "$JS.API.STREAM.INFO.") || strings.HasPrefix(s, "$JS.API.STREAM.MSG.GET.") ||
			strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.") || strings.HasPrefix(s, "$JS.API.CONSUMER.DELETE.") ||
			strings.HasPrefix(s, "$JS.FC.") || s == msg.APIHistoryAll || s == msg.APIDiffAll
		if !ok {
			t.Errorf("the auditor may publish %s", s)
		}
	}
}

func TestUnknownRole(t *testing.T) {
	if _, err := msg.AccessOf("root"); !errors.Is(err, msg.ErrUnknownRole) {
		t.Fatalf("err = %v, want ErrUnknownRole", err)
	}
}
