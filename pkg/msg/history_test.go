package msg_test

import (
	"errors"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// TestDecodeRequest: a request as a person types it with the NATS CLI
// (no schema field, an empty body) decodes; a wrong schema, bad JSON or a
// missing field is a typed error.
func TestDecodeRequest(t *testing.T) {
	cases := []struct {
		name, body string
		want       error
		to         string
	}{
		{"no schema", `{"to":"3"}`, nil, "3"},
		{"with its schema", `{"schema":"weft.rollbackrequest.v1","to":"v2"}`, nil, "v2"},
		{"a later major version", `{"schema":"weft.rollbackrequest.v2","to":"3"}`, msg.ErrUnknownVersion, ""},
		{"another type", `{"schema":"weft.render.v1","to":"3"}`, msg.ErrMalformed, ""},
		{"not JSON", `to=3`, msg.ErrMalformed, ""},
		{"missing field", `{}`, msg.ErrInvalid, ""},
		{"empty body", ``, msg.ErrInvalid, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r msg.RollbackRequest
			err := msg.DecodeRequest([]byte(tc.body), &r)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if r.To != tc.to {
				t.Fatalf("to = %q, want %q", r.To, tc.to)
			}
		})
	}
	var h msg.HistoryRequest
	if err := msg.DecodeRequest(nil, &h); err != nil {
		t.Fatalf("an empty history request: %v", err)
	}
}

// TestDecodeReply: an error answer comes back as an *APIError with its
// message; a reply decodes into its type.
func TestDecodeReply(t *testing.T) {
	data, err := msg.Encode(msg.APIError{Message: "edge v2 was refused by validation"})
	if err != nil {
		t.Fatal(err)
	}
	var rep msg.RollbackReply
	err = msg.DecodeReply(data, &rep)
	if !msg.IsAPIError(err) || err.Error() != "edge v2 was refused by validation" {
		t.Fatalf("err = %v, want the APIError", err)
	}
	data, err = msg.Encode(msg.UnpinReply{Target: "edge", Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	var up msg.UnpinReply
	if err := msg.DecodeReply(data, &up); err != nil || up.Version != 4 {
		t.Fatalf("unpin reply %+v: %v", up, err)
	}
}
