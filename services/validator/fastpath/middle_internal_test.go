package fastpath

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMiddle: prefix, middle and suffix put a and b back together, the
// prefix and suffix are whole lines both share, and when a and b have as
// many lines, the middles hold exactly the lines that differ, at the same
// positions (checked against a split of the whole files, on random files
// of a few possible lines, some thousands long, with or without a final
// newline, and with one byte changed).
func TestMiddle(t *testing.T) {
	words := []string{"a", "b", "ab", "", "  server x 1", "backend y"}
	rnd := rand.New(rand.NewPCG(1, 2))
	long := bytes.Repeat([]byte("  server s 10.0.0.1:80\n"), 800) // beyond middle's chunk
	gen := func() []byte {
		var buf bytes.Buffer
		if rnd.IntN(4) == 0 {
			buf.Write(long)
		}
		for range rnd.IntN(6) {
			buf.WriteString(words[rnd.IntN(len(words))])
			buf.WriteByte('\n')
		}
		if rnd.IntN(4) == 0 {
			buf.Write(long)
		}
		if rnd.IntN(3) == 0 {
			buf.WriteString(words[rnd.IntN(len(words))])
		}
		return buf.Bytes()
	}
	for range 20000 {
		a := gen()
		b := a
		switch rnd.IntN(4) {
		case 0:
		case 1: // one byte changed somewhere
			if len(a) > 0 {
				b = bytes.Clone(a)
				b[rnd.IntN(len(b))] = "xa\n "[rnd.IntN(4)]
			}
		default:
			b = gen()
		}
		p, am, bm := middle(a, b)
		as, bs := a[p+len(am):], b[p+len(bm):]
		if !bytes.Equal(a[:p], b[:p]) || !bytes.Equal(as, bs) {
			t.Fatalf("middle(%q, %q): prefix or suffix differ: %d %q %q", a, b, p, am, bm)
		}
		if p > 0 && a[p-1] != '\n' || len(as) > 0 && (p+len(am) > 0 && a[p+len(am)-1] != '\n' || p+len(bm) > 0 && b[p+len(bm)-1] != '\n') {
			t.Fatalf("middle(%q, %q): not whole lines: %d %q %q", a, b, p, am, bm)
		}
		al, bl := splitLines(a), splitLines(b)
		ml, nl := splitLines(am), splitLines(bm)
		if (len(al) == len(bl) && endsLine(a) == endsLine(b)) != (len(ml) == len(nl) && (len(am) == 0 && len(bm) == 0 || endsLine(am) == endsLine(bm))) {
			t.Fatalf("middle(%q, %q): line counts %d/%d, middles %d/%d", a, b, len(al), len(bl), len(ml), len(nl))
		}
		if len(al) != len(bl) || endsLine(a) != endsLine(b) {
			continue
		}
		first := bytes.Count(a[:p], []byte("\n"))
		for i := range al {
			in := i >= first && i < first+len(ml)
			if !bytes.Equal(al[i], bl[i]) && !in {
				t.Fatalf("middle(%q, %q): line %d differs outside the middle", a, b, i)
			}
			if in && !slices.Equal(al[i], ml[i-first]) {
				t.Fatalf("middle(%q, %q): middle line %d is %q, the file's %q", a, b, i, ml[i-first], al[i])
			}
		}
	}
}
