package validator

import (
	"time"

	"github.com/weftio/weft/services/validator/kind"
)

// WithCheckerWrap returns o with every served checker replaced by
// wrap(checker): a test's way to make a kind disagree with itself.
func WithCheckerWrap(o Options, wrap func(kind.Checker) kind.Checker) Options {
	o.wrapChecker = wrap
	return o
}

// WithPendingSweep returns o sweeping for unconfirmed pending bundles
// every d instead of every 30 s.
func WithPendingSweep(o Options, d time.Duration) Options {
	o.pendingSweep = d
	return o
}
