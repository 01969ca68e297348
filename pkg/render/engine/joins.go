package engine

import (
	"io"
	"slices"
	"strings"
)

// A fragment part joined over the entries (fragments(name[, part])) is
// cached in blocks of joinBlock entries in id order. A change of one
// entry's text re-joins only its block, and an output that writes the part
// writes the blocks one after the other, so after one change the cost of
// the part is one block, not one lookup per entry. A change of order (an
// entry added or dropped) cuts the blocks again. The whole join, the
// string fragments() returns in an expression, is kept beside the blocks
// until the part's version changes.

// joinBlock is how many entries one block joins.
const joinBlock = 64

// join is one part joined over a fragment's entries.
type join struct {
	shape  uint64 // the fragState's shape the blocks were cut at
	blocks []string
	ok     []bool // the block is up to date
	// whole is every block joined, at version wholeVer (0: none).
	whole    string
	wholeVer uint64
}

// part returns the entry's text of the part ("": the main output).
func (e *entry) part(name string) string {
	if name == "" {
		return e.out
	}
	return e.parts[name]
}

// partChanged counts a change of e's text of the part and marks the block
// that holds e as out of date.
func (fs *fragState) partChanged(e *entry, part string) {
	fs.partVer[part]++
	j := fs.joins[part]
	if j == nil || j.shape != fs.shape {
		return
	}
	i, found := slices.BinarySearchFunc(fs.order, e.id, func(x *entry, id string) int { return strings.Compare(x.id, id) })
	if !found || fs.order[i] != e {
		delete(fs.joins, part)
		return
	}
	j.ok[i/joinBlock] = false
}

// joinOf returns the part's join with every block up to date.
func (fs *fragState) joinOf(part string) *join {
	j := fs.joins[part]
	if j == nil || j.shape != fs.shape {
		n := (len(fs.order) + joinBlock - 1) / joinBlock
		j = &join{shape: fs.shape, blocks: make([]string, n), ok: make([]bool, n)}
		fs.joins[part] = j
	}
	for b, ok := range j.ok {
		if ok {
			continue
		}
		entries := fs.order[b*joinBlock : min((b+1)*joinBlock, len(fs.order))]
		n := 0
		for _, e := range entries {
			n += len(e.part(part))
		}
		var sb strings.Builder
		sb.Grow(n)
		for _, e := range entries {
			sb.WriteString(e.part(part))
		}
		j.blocks[b], j.ok[b] = sb.String(), true
	}
	return j
}

// joinedOutput returns the part ("": the main output) of every entry
// joined in id order.
func (fs *fragState) joinedOutput(part string) string {
	j := fs.joinOf(part)
	if v := fs.partVersion(part); j.wholeVer != v {
		j.whole, j.wholeVer = strings.Join(j.blocks, ""), v
	}
	return j.whole
}

// writeJoined writes the part of every entry, in id order, to w.
func (fs *fragState) writeJoined(w io.Writer, part string) error {
	j := fs.joinOf(part)
	if j.wholeVer == fs.partVersion(part) {
		_, err := io.WriteString(w, j.whole)
		return err
	}
	for _, b := range j.blocks {
		if _, err := io.WriteString(w, b); err != nil {
			return err
		}
	}
	return nil
}
