package msg_test

import (
	"errors"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

func TestValidateRequestDryRun(t *testing.T) {
	tests := []struct {
		name    string
		req     msg.ValidateRequest
		invalid bool
		object  string
	}{
		{"a render's bundle is read under its hash", msg.ValidateRequest{Target: "lb", BundleHash: "abc"}, false, "abc"},
		{"a dry run's under its own name", msg.ValidateRequest{Target: "lb", BundleHash: "abc", DryRunObject: msg.DryRunObjectName("uid-lb")}, false, "dryrun-uid-lb"},
		{"a dry run of a configuration is refused", msg.ValidateRequest{Target: msg.ConfigTarget, ConfigHash: "c", DryRunObject: "dryrun-x"}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := msg.Encode(tt.req)
			if tt.invalid {
				if !errors.Is(err, msg.ErrInvalid) {
					t.Fatalf("Encode = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got msg.ValidateRequest
			if err := msg.Decode(data, &got); err != nil {
				t.Fatal(err)
			}
			if got.BundleObject() != tt.object {
				t.Fatalf("BundleObject = %q, want %q", got.BundleObject(), tt.object)
			}
		})
	}
}
