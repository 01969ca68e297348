package fastpath

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestEachDiffering: on random files of a few possible lines, some
// thousands long, with several edits far apart (bytes changed, lines
// replaced by longer or shorter ones, lines added or removed, the final
// newline added or removed), eachDiffering reports the same pairs of
// differing lines, and the same answer on the line counts, as a split of
// the whole files.
func TestEachDiffering(t *testing.T) {
	words := []string{"a", "b", "ab", "", "  server x 1", "backend y", "  server x 10.0.0.1:80"}
	rnd := rand.New(rand.NewPCG(3, 4))
	long := bytes.Repeat([]byte("  server s 10.0.0.1:80\n"), 400) // beyond the block compare
	gen := func() []string {
		var ls []string
		for range rnd.IntN(4) {
			if rnd.IntN(3) == 0 {
				ls = append(ls, strings.Split(strings.TrimSuffix(string(long), "\n"), "\n")...)
			}
			for range rnd.IntN(6) {
				ls = append(ls, words[rnd.IntN(len(words))])
			}
		}
		return ls
	}
	join := func(ls []string, final bool) []byte {
		s := strings.Join(ls, "\n")
		if final && len(ls) > 0 {
			s += "\n"
		}
		return []byte(s)
	}
	type pair struct{ a, b string }
	for range 20000 {
		al := gen()
		bl := slices.Clone(al)
		for range rnd.IntN(4) {
			switch k := rnd.IntN(5); {
			case len(bl) == 0:
				bl = append(bl, words[rnd.IntN(len(words))])
			case k == 0: // a line added
				i := rnd.IntN(len(bl) + 1)
				bl = slices.Insert(bl, i, words[rnd.IntN(len(words))])
			case k == 1: // a line removed
				i := rnd.IntN(len(bl))
				bl = slices.Delete(bl, i, i+1)
			case k == 2: // a byte changed
				i := rnd.IntN(len(bl))
				if l := []byte(bl[i]); len(l) > 0 {
					l[rnd.IntN(len(l))] = "xa1 "[rnd.IntN(4)]
					bl[i] = string(l)
				}
			default: // a line replaced
				bl[rnd.IntN(len(bl))] = words[rnd.IntN(len(words))]
			}
		}
		af, bf := rnd.IntN(4) != 0, rnd.IntN(4) != 0
		if rnd.IntN(2) == 0 {
			bf = af
		}
		a, b := join(al, af), join(bl, bf)
		wa, wb := splitLines(a), splitLines(b)
		wantSame := len(wa) == len(wb) && (len(a) == 0 && len(b) == 0 || endsLine(a) == endsLine(b))
		var got []pair
		same, err := eachDiffering(a, b, func(ia, ib int, la, lb []byte) error {
			if ia > 0 && a[ia-1] != '\n' || ib > 0 && b[ib-1] != '\n' || !bytes.HasPrefix(a[ia:], la) || !bytes.HasPrefix(b[ib:], lb) {
				t.Fatalf("eachDiffering(%q, %q): lines %q at %d and %q at %d are not lines of the files there", a, b, la, ia, lb, ib)
			}
			got = append(got, pair{string(la), string(lb)})
			return nil
		})
		if err != nil || same != wantSame {
			t.Fatalf("eachDiffering(%q, %q) = %v, %v; a split says %v", a, b, same, err, wantSame)
		}
		if !same {
			continue
		}
		var want []pair
		for i := range wa {
			if !bytes.Equal(wa[i], wb[i]) {
				want = append(want, pair{string(wa[i]), string(wb[i])})
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("eachDiffering(%q, %q): pairs %q, a split's %q", a, b, got, want)
		}
	}
}
