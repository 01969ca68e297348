package validator

import "github.com/weftio/weft/services/validator/kind"

// WithCheckerWrap returns o with every served checker replaced by
// wrap(checker): a test's way to make a kind disagree with itself.
func WithCheckerWrap(o Options, wrap func(kind.Checker) kind.Checker) Options {
	o.wrapChecker = wrap
	return o
}
