package controller

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/weftio/weft/pkg/msg"
)

// A conflict (another replica wrote first) is retried as msg.ErrBusy, any
// other failure as itself, and a permanent error stays permanent.
func TestRetryable(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "weft.io", Resource: "prepullimages"}, "web", errors.New("modified"))
	wrapped := errors.Join(nil, fmt.Errorf("update the status: %w", conflict))
	if err := retryable(wrapped); !errors.Is(err, msg.ErrBusy) || msg.Classify(err).Action != msg.Nak {
		t.Errorf("conflict: %v, want a retry as ErrBusy", err)
	}
	if err := retryable(errors.New("timeout")); errors.Is(err, msg.ErrBusy) || msg.Classify(err).Action != msg.Nak {
		t.Errorf("timeout: %v, want a plain retry", err)
	}
	if err := retryable(msg.Permanent(errors.New("bad"))); msg.Classify(err).Action != msg.Term {
		t.Errorf("permanent: %v, want Term", err)
	}
	if retryable(nil) != nil {
		t.Error("nil is not nil")
	}
}
