package haproxycfg

import (
	"fmt"
	"sync"
	"testing"

	parser "github.com/haproxytech/client-native/v6/config-parser"
)

// TestParseConcurrently parses configurations with named defaults sections
// from several goroutines; under the race detector it fails unless the
// parses are serialized.
func TestParseConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			text := fmt.Sprintf("defaults d%d\n    mode http\n\nbackend b%d\n    server s 127.0.0.1:80\n", i, i)
			p, err := Parse(text)
			if err != nil {
				t.Errorf("parse %d: %v", i, err)
				return
			}
			if names, err := p.SectionsGet(parser.Backends); err != nil || len(names) != 1 || names[0] != fmt.Sprintf("b%d", i) {
				t.Errorf("parse %d: backends %v, %v", i, names, err)
			}
		})
	}
	wg.Wait()
}
