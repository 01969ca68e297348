package msg_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// configText is an haproxy.cfg-like text of n backends.
func configText(n int) []byte {
	var b bytes.Buffer
	b.WriteString("global\n  log stdout format raw local0\n\ndefaults\n  mode http\n")
	for i := range n {
		fmt.Fprintf(&b, "\nbackend be_ns%d_app%04d\n  balance roundrobin\n  option httpchk GET /healthz\n", i%7, i)
		for s := range 3 {
			fmt.Fprintf(&b, "  server s%d 10.%d.%d.%d:8080 check weight 100\n", s, i/250, i%250, s+1)
		}
	}
	return b.Bytes()
}

func chunksOf(data []byte) [][]byte {
	var out [][]byte
	start := 0
	for _, end := range msg.ChunkEnds(data) {
		out = append(out, data[start:end])
		start = end
	}
	return out
}

// lineAt returns the offsets of the line that holds offset i.
func lineAt(data []byte, i int) (int, int) {
	start := bytes.LastIndexByte(data[:i], '\n') + 1
	end := i + bytes.IndexByte(data[i:], '\n') + 1
	return start, end
}

func splice(data []byte, start, end int, repl string) []byte {
	out := append([]byte{}, data[:start]...)
	out = append(out, repl...)
	return append(out, data[end:]...)
}

func TestChunkEndsBounds(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	binary := make([]byte, 200<<10)
	for i := range binary {
		binary[i] = byte(rnd.IntN(255) + 1)
		if binary[i] == '\n' {
			binary[i] = 'x'
		}
	}
	longLines := bytes.Repeat(append(bytes.Repeat([]byte("y"), 50<<10), '\n'), 4)
	for _, tc := range []struct {
		name      string
		data      []byte
		wantCount int // -1: any
		atLines   bool
	}{
		{"empty", nil, 0, true},
		{"one byte", []byte("x"), 1, true},
		{"below the minimum", bytes.Repeat([]byte("line\n"), msg.ChunkMin/5), 1, true},
		{"config", configText(3000), -1, true},
		{"no line ends: cut at the maximum", binary, (len(binary) + msg.ChunkMax - 1) / msg.ChunkMax, false},
		{"lines longer than the maximum", longLines, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := chunksOf(tc.data)
			if tc.wantCount >= 0 && len(cs) != tc.wantCount {
				t.Fatalf("%d chunks, want %d", len(cs), tc.wantCount)
			}
			if got := bytes.Join(cs, nil); !bytes.Equal(got, tc.data) {
				t.Fatal("chunks do not join to the data")
			}
			for i, c := range cs {
				last := i == len(cs)-1
				if len(c) == 0 || len(c) > msg.ChunkMax || (!last && len(c) < msg.ChunkMin) {
					t.Fatalf("chunk %d of %d has %d bytes (min %d, max %d)", i, len(cs), len(c), msg.ChunkMin, msg.ChunkMax)
				}
				if tc.atLines && !last && c[len(c)-1] != '\n' {
					t.Fatalf("chunk %d does not end a line", i)
				}
			}
		})
	}
}

func TestChunkEndsStableUnderEdits(t *testing.T) {
	base := configText(4000) // ~600 KB
	mid := len(base) / 2
	ls, le := lineAt(base, mid)
	for _, tc := range []struct {
		name string
		edit []byte
	}{
		{"replace a line", splice(base, ls, le, "  server s1 10.99.99.99:8080 check weight 50\n")},
		{"insert a line", splice(base, ls, ls, "  server s9 10.1.2.3:8080 check\n")},
		{"delete a line", splice(base, ls, le, "")},
		{"insert at the start", splice(base, 0, 0, "# header\n")},
		{"append at the end", append(append([]byte{}, base...), "backend extra\n"...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := map[[32]byte]bool{}
			for _, c := range chunksOf(base) {
				old[sha256.Sum256(c)] = true
			}
			cs := chunksOf(tc.edit)
			var fresh []int
			for i, c := range cs {
				if !old[sha256.Sum256(c)] {
					fresh = append(fresh, i)
				}
			}
			if len(cs) < 50 {
				t.Fatalf("only %d chunks for %d bytes", len(cs), len(tc.edit))
			}
			if len(fresh) == 0 || len(fresh) > 2 {
				t.Fatalf("%d of %d chunks changed (%v), want 1 or 2", len(fresh), len(cs), fresh)
			}
			if len(fresh) == 2 && fresh[1] != fresh[0]+1 {
				t.Fatalf("changed chunks %v are not neighbours", fresh)
			}
		})
	}
}
