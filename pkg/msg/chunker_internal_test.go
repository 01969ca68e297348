package msg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRechunkIsChunkEnds edits texts at random (lines replaced, inserted,
// removed; bytes flipped; the front or back cut off or grown) and checks
// that rechunk cuts each exactly as ChunkEnds does, and that every chunk
// it says is old's has old's bytes.
func TestRechunkIsChunkEnds(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 11))
	// text(n) is the configuration of n backends: a prefix of one text
	// written once (no edit changes its input in place).
	var all []byte
	var lineEnds []int
	for i := range 10_000 {
		all = fmt.Appendf(all, "backend be_%d\n  server s1 10.0.%d.%d:8080 check\n", i, i/250, i%250)
		lineEnds = append(lineEnds, len(all))
	}
	text := func(n int) []byte {
		if n == 0 {
			return nil
		}
		return all[:lineEnds[n-1]:lineEnds[n-1]]
	}
	// local edits change a few bytes in one place: all but the chunks
	// near them must be old's.
	edits := []struct {
		name  string
		local bool
		edit  func([]byte) []byte
	}{
		{"nothing", true, func(d []byte) []byte { return slices.Clone(d) }},
		{"a line replaced", true, func(d []byte) []byte {
			i := rnd.IntN(len(d))
			s := bytes.LastIndexByte(d[:i], '\n') + 1
			return slices.Concat(d[:s], []byte(fmt.Sprintf("  server s9 192.0.2.%d:80\n", rnd.IntN(255))), d[s:])
		}},
		{"bytes flipped", false, func(d []byte) []byte {
			out := slices.Clone(d)
			for range 1 + rnd.IntN(3) {
				out[rnd.IntN(len(out))] = byte('a' + rnd.IntN(26))
			}
			return out
		}},
		{"a run removed", false, func(d []byte) []byte {
			i := rnd.IntN(len(d))
			j := min(len(d), i+rnd.IntN(20000))
			return slices.Concat(d[:i], d[j:])
		}},
		{"a run inserted", false, func(d []byte) []byte {
			i := rnd.IntN(len(d))
			return slices.Concat(d[:i], text(1+rnd.IntN(300)), d[i:])
		}},
		{"front cut", false, func(d []byte) []byte { return slices.Clone(d[rnd.IntN(len(d)):]) }},
		{"back cut", false, func(d []byte) []byte { return slices.Clone(d[:rnd.IntN(len(d))]) }},
		{"grown at the back", false, func(d []byte) []byte { return slices.Concat(d, text(rnd.IntN(200))) }},
		{"emptied", false, func([]byte) []byte { return nil }},
	}
	for _, tc := range edits {
		t.Run(tc.name, func(t *testing.T) {
			for round := range 200 {
				old := text(1 + rnd.IntN(10_000))
				var data []byte
				if round%10 == 0 { // from nothing
					old, data = nil, text(rnd.IntN(100))
				} else {
					data = tc.edit(old)
				}
				oldEnds := ChunkEnds(old)
				ends, same := rechunk(old, oldEnds, data)
				if want := ChunkEnds(data); !slices.Equal(ends, want) {
					t.Fatalf("round %d: rechunk cut %d chunks, ChunkEnds %d", round, len(ends), len(want))
				}
				if len(same) != len(ends) {
					t.Fatalf("round %d: %d ends, %d sources", round, len(ends), len(same))
				}
				anew := 0
				for i, j := range same {
					if j < 0 {
						anew++
						continue
					}
					start, ostart := 0, 0
					if i > 0 {
						start = ends[i-1]
					}
					if j > 0 {
						ostart = oldEnds[j-1]
					}
					if !bytes.Equal(data[start:ends[i]], old[ostart:oldEnds[j]]) {
						t.Fatalf("round %d: chunk %d taken from old chunk %d, but their bytes differ", round, i, j)
					}
				}
				// Cut anew: up to ChunkMax before the edit and until
				// the cuts meet old's again after it.
				if tc.local && len(old) > 200<<10 && anew > 4*ChunkMax/ChunkMin {
					t.Errorf("round %d: %d of %d chunks cut anew after a local edit", round, anew, len(ends))
				}
			}
		})
	}
}
