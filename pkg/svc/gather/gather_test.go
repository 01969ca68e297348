package gather_test

import (
	"slices"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/gather"
)

func TestVerdictOfAResult(t *testing.T) {
	ok := func(k string) msg.ValidateReply { return msg.ValidateReply{Kind: k, OK: true} }
	refused := func(k string) msg.ValidateReply { return msg.ValidateReply{Kind: k} }
	undecided := func(k string) msg.ValidateReply {
		return msg.ValidateReply{Kind: k, Error: "bundle not in the object store"}
	}
	tests := []struct {
		name      string
		res       gather.Result
		min       int
		decided   bool
		accepted  bool
		undecided []string
	}{
		{"all accepted", gather.Result{Replies: []msg.ValidateReply{ok("a"), ok("b")}}, 0, true, true, nil},
		{"one refused", gather.Result{Replies: []msg.ValidateReply{ok("a"), refused("b")}}, 0, true, false, nil},
		{"one refused, another missing: refused", gather.Result{Replies: []msg.ValidateReply{refused("b")}, Missing: []string{"a"}}, 0, true, false, []string{"a"}},
		{"one missing: ask again", gather.Result{Replies: []msg.ValidateReply{ok("b")}, Missing: []string{"a"}}, 0, false, false, []string{"a"}},
		{"one could not decide: ask again", gather.Result{Replies: []msg.ValidateReply{ok("a"), undecided("b")}}, 0, false, false, []string{"b"}},
		{"one could not decide, minimum met", gather.Result{Replies: []msg.ValidateReply{ok("a"), ok("c"), undecided("b")}}, 2, true, true, []string{"b"}},
		{"one missing, minimum met", gather.Result{Replies: []msg.ValidateReply{ok("a"), ok("c")}, Missing: []string{"b"}}, 2, true, true, []string{"b"}},
		{"minimum not met", gather.Result{Replies: []msg.ValidateReply{ok("a"), undecided("c")}, Missing: []string{"b"}}, 2, false, false, []string{"b", "c"}},
	}
	for _, tc := range tests {
		if got := tc.res.Decided(tc.min); got != tc.decided {
			t.Errorf("%s: Decided = %v, want %v", tc.name, got, tc.decided)
		}
		if got := tc.res.Accepted(tc.min); got != tc.accepted {
			t.Errorf("%s: Accepted = %v, want %v", tc.name, got, tc.accepted)
		}
		if got := tc.res.Undecided(); !slices.Equal(got, tc.undecided) {
			t.Errorf("%s: Undecided = %v, want %v", tc.name, got, tc.undecided)
		}
	}
}
