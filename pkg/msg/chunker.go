package msg

import (
	"bytes"
	"math/bits"
	"slices"
)

// Content-defined chunking of stored files (BundleStore). A file is cut
// into chunks at line ends chosen by a rolling hash of the bytes before
// them, so an edit changes the chunk it falls in (and at most its
// neighbour) while every later chunk keeps its bytes and so its hash: a
// new bundle that differs by one line of a large haproxy.cfg stores one
// or two new chunks.
const (
	// ChunkMin and ChunkMax bound a chunk's size; a chunk is cut at a line
	// end once a line in it made the rolling hash hit the mask (about one
	// byte in 2^ChunkAvgBits), or at the last line end before ChunkMax
	// (at ChunkMax itself when there is none: binary content, very long
	// lines).
	ChunkMin     = 1 << 9
	ChunkMax     = 8 << 10
	ChunkAvgBits = 10
	chunkMask    = 1<<ChunkAvgBits - 1
)

// gear is a table of random 64-bit values, one per byte value, for the
// gear rolling hash (h = h<<1 + gear[b]): the hash at a byte depends on
// the 64 bytes before it only. Fixed, so chunk boundaries are the same in
// every process and release.
var gear = func() (t [256]uint64) {
	// splitmix64 from a fixed seed.
	x := uint64(0x9e3779b97f4a7c15)
	for i := range t {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		t[i] = z ^ (z >> 31)
	}
	return t
}()

// ChunkEnds returns the end offset of each chunk of data (the last is
// len(data)); none for empty data. Boundaries depend on the content near
// them only, so inserting, removing or replacing a line moves no boundary
// more than a chunk away from the edit.
func ChunkEnds(data []byte) []int {
	var ends []int
	start := 0
	for start < len(data) {
		end := nextCut(data[start:])
		start += end
		ends = append(ends, start)
	}
	return ends
}

// nextCut returns the length of the first chunk of data.
func nextCut(data []byte) int {
	if len(data) <= ChunkMin {
		return len(data)
	}
	var h uint64
	hit := false   // the rolling hash hit the mask since the chunk's minimum
	lastLine := -1 // the last line end at or after ChunkMin
	limit := min(len(data), ChunkMax)
	// The hash at a byte depends on the 64 bytes up to it only: it starts
	// 64 bytes before the minimum.
	for i := ChunkMin - 64; i < limit; i++ {
		b := data[i]
		h = h<<1 + gear[b]
		if i < ChunkMin-1 {
			continue
		}
		// The top bits mix best in a gear hash.
		if bits.RotateLeft64(h, ChunkAvgBits)&chunkMask == 0 {
			hit = true
		}
		if b == '\n' {
			if hit {
				return i + 1
			}
			lastLine = i + 1
		}
	}
	if limit < ChunkMax {
		return limit // the rest of the file
	}
	if lastLine > 0 {
		return lastLine
	}
	return limit
}

// rechunk cuts data as ChunkEnds does, given old and its chunk ends
// (oldEnds, from ChunkEnds or rechunk): it reads only around where data
// differs from old. same[i] is the index of the chunk of old whose bytes
// chunk i of data has (it was not cut again), or -1 for a chunk cut anew.
//
// A chunk of old is kept at the front while every byte its cut read lies
// in the prefix old and data share: a cut reads at most ChunkMax bytes
// from the chunk's start, and nothing after it. Past the change, cutting
// resumes on data until a cut lands, inside the suffix both share, on the
// offset where a chunk of old starts: cuts depend on the bytes from a
// chunk's start on only, so every later chunk is old's, moved.
func rechunk(old []byte, oldEnds []int, data []byte) (ends, same []int) {
	p := commonPrefix(old, data)
	q := commonSuffix(old[p:], data[p:])
	delta := len(data) - len(old)
	start := 0
	for i, e := range oldEnds {
		if start+ChunkMax > p {
			break
		}
		ends, same = append(ends, e), append(same, i)
		start = e
	}
	for start < len(data) {
		start += nextCut(data[start:])
		ends, same = append(ends, start), append(same, -1)
		if start >= len(data) || start < len(data)-q {
			continue
		}
		// data[start:] equals old[start-delta:]: where a chunk of old
		// starts there, the rest are old's.
		j, found := slices.BinarySearch(oldEnds, start-delta)
		if !found || start-delta >= len(old) {
			continue
		}
		for k := j + 1; k < len(oldEnds); k++ {
			ends, same = append(ends, oldEnds[k]+delta), append(same, k)
		}
		break
	}
	return ends, same
}

// commonPrefix returns how many bytes a and b share at the front.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	// Compare in blocks first: bytes.Equal is far faster than a loop.
	const block = 4096
	i := 0
	for i+block <= n && bytes.Equal(a[i:i+block], b[i:i+block]) {
		i += block
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix returns how many bytes a and b share at the back.
func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	const block = 4096
	i := 0
	for i+block <= n && bytes.Equal(a[len(a)-i-block:len(a)-i], b[len(b)-i-block:len(b)-i]) {
		i += block
	}
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}
