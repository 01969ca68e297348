package manifests

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

// pagingSink is a recordingSink that takes complete listings page by page
// (source.PageSink), recording each page and what was read by then.
type pagingSink struct {
	recordingSink
	reads *readCounter
	fail  error // ReplacePages fails after its first page while set

	mu    sync.Mutex
	pages [][]string // each page's objects, described
	read  []int      // files read when each page came
	ended int        // listings ended
}

var _ source.PageSink = (*pagingSink)(nil)

func (s *pagingSink) ReplacePages(_ context.Context, types []string, pages iter.Seq2[[]store.Object, error]) error {
	for page, err := range pages {
		if err != nil {
			return err
		}
		var objs []string
		for _, o := range page {
			if !slices.Contains(types, o.Type) {
				return fmt.Errorf("object of type %s in a listing of %v", o.Type, types)
			}
			objs = append(objs, describeObject(o))
		}
		slices.Sort(objs)
		s.mu.Lock()
		s.pages = append(s.pages, objs)
		s.read = append(s.read, s.reads.total())
		fail := s.fail
		s.mu.Unlock()
		if fail != nil {
			return fail
		}
	}
	s.mu.Lock()
	s.ended++
	s.mu.Unlock()
	return nil
}

func (c *readCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.n {
		n += v
	}
	return n
}

// TestFirstListingInChunks: the source's first complete listing reads and
// stores its files chunkFiles at a time, in path order, each identity once
// with the copy of the file first in path order, even when its duplicate
// is in another chunk; a listing the sink fails is listed again in full.
func TestFirstListingInChunks(t *testing.T) {
	dir := newRoot(t)
	const files = 2*chunkFiles + 3
	for i := range files {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%03d.yaml", i)), configMap(fmt.Sprintf("cm%03d", i), "v"))
	}
	// A duplicate of the first file's identity, in the last chunk.
	writeFile(t, filepath.Join(dir, fmt.Sprintf("f%03d.yaml", files-1)), configMap("cm000", "duplicate"))
	var reads readCounter
	sink := &pagingSink{reads: &reads, fail: errors.New("nats: no response from stream")}
	startSource(t, dir, sink, &reads)

	deadline := time.Now().Add(waitTimeout)
	for {
		sink.mu.Lock()
		ended, n := sink.ended, len(sink.pages)
		if n > 0 && sink.fail != nil {
			sink.fail = nil // the first listing failed after its first page
		}
		sink.mu.Unlock()
		if ended > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no complete listing within %s; %d pages", waitTimeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.read[0] > chunkFiles {
		t.Errorf("%d files read when the first page came, want at most %d", sink.read[0], chunkFiles)
	}
	pages := sink.pages[1:] // after the failed listing's page
	var sizes []int
	var all []string
	for _, p := range pages {
		sizes = append(sizes, len(p))
		all = append(all, p...)
	}
	if want := []int{chunkFiles, chunkFiles, 2}; !slices.Equal(sizes, want) {
		t.Errorf("pages of %v objects, want %v", sizes, want)
	}
	if !slices.Contains(all, "configmaps/shop/cm000=v") || slices.ContainsFunc(all, func(s string) bool { return strings.Contains(s, "duplicate") }) {
		t.Errorf("cm000 reported as %q, want only the first file's copy", slices.DeleteFunc(slices.Clone(all), func(s string) bool { return !strings.Contains(s, "cm000") }))
	}
	if calls := sink.since(0); len(calls) > 0 {
		t.Errorf("the first listing also came as %q", calls)
	}
}
