package msg

import "sync"

// Cutter cuts the files of one target's bundles into chunks (ChunkEnds)
// and hashes them, each against the same file as it cut it last, so that
// a bundle that differs from the last by a few lines is cut and hashed
// only there: its ComputeHash, Refs and PutBundle then read none of the
// rest. Safe for concurrent use; it keeps the files of the last bundle it
// cut (their content as given: read only).
type Cutter struct {
	mu   sync.Mutex
	last map[string]cutFile
}

// Cut returns files with how each is cut known. The files' content is not
// copied.
func (c *Cutter) Cut(files []BundleFile) []BundleFile {
	c.mu.Lock()
	prev := c.last
	c.mu.Unlock()
	out := make([]BundleFile, len(files))
	next := make(map[string]cutFile, len(files))
	for i, f := range files {
		cut := f.cutOr(prev[f.Path])
		next[f.Path] = cut
		f.cut = &cut
		out[i] = f
	}
	c.mu.Lock()
	c.last = next
	c.mu.Unlock()
	return out
}
