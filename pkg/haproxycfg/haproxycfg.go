// Package haproxycfg parses HAProxy configurations with client-native's
// configuration parser, for every part of weft that does: the validator's
// syntax kind, the deploy drivers and dataplanetest. That parser writes a
// package-level variable (the name of the last defaults section it read)
// while it reads, so two parses at once race, as when a target's
// instances deploy in parallel, or when the validator checks a bundle
// while the deployer in the same process compares another. Every parse in
// the process goes through this one lock; the Parser returned belongs to
// the caller, and reading it touches no shared state.
package haproxycfg

import (
	"sync"

	parser "github.com/haproxytech/client-native/v6/config-parser"
	"github.com/haproxytech/client-native/v6/config-parser/options"
)

var mu sync.Mutex

// Parse reads text, listen sections included, one parse at a time.
func Parse(text string) (parser.Parser, error) {
	return ParseWith(text, options.UseListenSectionParsers)
}

// ParseWith reads text with exactly the options given, one parse at a time.
func ParseWith(text string, opts ...options.ParserOption) (parser.Parser, error) {
	mu.Lock()
	defer mu.Unlock()
	return parser.New(append([]options.ParserOption{options.String(text)}, opts...)...)
}
