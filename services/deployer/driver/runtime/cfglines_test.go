package runtime

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestDiffConfigLinesAgreesWithParsed: whenever diffConfigLines decides,
// its answer is the whole parse's (the same operations, or a structure
// error), over the cases of TestDiffConfig's base and random edits of
// random lines (server fields, directives, headers, comments, lines added
// and removed, text without a final line feed).
func TestDiffConfigLinesAgreesWithParsed(t *testing.T) {
	t.Parallel()
	base := cfgBase + "backend big\n"
	for i := range 200 {
		base += fmt.Sprintf("    server s%d 10.1.%d.%d:80 check\n", i, i/250, i%250)
	}
	edits := []func(line string, r *rand.Rand) string{
		func(l string, r *rand.Rand) string { // an address
			return strings.Replace(l, "10.", fmt.Sprintf("10.%d", r.IntN(9)), 1)
		},
		func(l string, r *rand.Rand) string { return l + " weight " + fmt.Sprint(r.IntN(300)) },
		func(l string, r *rand.Rand) string { return l + " disabled" },
		func(l string, r *rand.Rand) string { return strings.Replace(l, "server", "server ", 1) }, // spacing
		func(l string, r *rand.Rand) string { return l + " # note" },
		func(l string, r *rand.Rand) string { return "    # " + l },
		func(l string, r *rand.Rand) string { return "backend x" + fmt.Sprint(r.IntN(3)) },
		func(l string, r *rand.Rand) string { return l + "\n    server extra 10.9.9.9:80" },
		func(l string, r *rand.Rand) string { return "" },
		func(l string, r *rand.Rand) string { return strings.Replace(l, "s1", "t1", 1) },
		func(l string, r *rand.Rand) string { return "    timeout server " + fmt.Sprint(r.IntN(9)) + "s" },
	}
	r := rand.New(rand.NewPCG(1, 2))
	decided := 0
	for round := range 3000 {
		lines := strings.Split(base, "\n")
		for range 1 + r.IntN(3) {
			k := r.IntN(len(lines))
			lines[k] = edits[r.IntN(len(edits))](lines[k], r)
		}
		cand := strings.Join(lines, "\n")
		if r.IntN(10) == 0 {
			cand = strings.TrimSuffix(cand, "\n")
		}
		fast, ok, ferr := diffConfigLines([]byte(base), []byte(cand), nil)
		if !ok {
			continue
		}
		decided++
		whole, werr := diffConfigParsed([]byte(base), []byte(cand))
		var fse, wse *structureError
		if errors.As(ferr, &fse) != errors.As(werr, &wse) || (ferr == nil) != (werr == nil) {
			bl, cl := strings.Split(base, "\n"), strings.Split(cand, "\n")
			var d []string
			for i := range min(len(bl), len(cl)) {
				if bl[i] != cl[i] {
					d = append(d, fmt.Sprintf("%d: %q -> %q", i+1, bl[i], cl[i]))
				}
			}
			t.Fatalf("round %d: lines say %v, the whole parse %v; changed lines: %s", round, ferr, werr, strings.Join(d, "; "))
		}
		if ferr != nil {
			continue
		}
		if got, want := opsOf(fast), opsOf(whole); !slices.Equal(got, want) {
			t.Fatalf("round %d: lines give %q, the whole parse %q\n%s", round, got, want, cand)
		}
	}
	if decided < 1000 {
		t.Fatalf("the lines path decided only %d of 3000 edits", decided)
	}
}

func opsOf(changes []serverChange) []string {
	var out []string
	for _, c := range changes {
		for _, o := range c.ops() {
			out = append(out, o.cmd)
		}
	}
	return out
}

func TestMiddle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b, midA, midB string }{
		{"x\ny\nz\n", "x\ny\nz\n", "", ""},
		{"x\ny\nz\n", "x\nY\nz\n", "y\n", "Y\n"},
		{"abc", "xabc", "abc", "xabc"},
		{"x\nab\n", "x\nb\n", "ab\n", "b\n"},
		{"x\ny", "x\ny\n", "y", "y\n"},
		{"", "a\n", "", "a\n"},
		{"a\na\n", "a\na\na\n", "", "a\n"},
	} {
		s, ea, eb := middle([]byte(tc.a), []byte(tc.b))
		if tc.a[s:ea] != tc.midA || tc.b[s:eb] != tc.midB {
			t.Errorf("middle(%q, %q) = %q, %q; want %q, %q", tc.a, tc.b, tc.a[s:ea], tc.b[s:eb], tc.midA, tc.midB)
		}
	}
}

func TestConditional(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  string
		want bool
	}{
		{"global\n    maxconn 10\n", false},
		{"backend b\n    server a 10.0.0.1:80\n", false},
		{".if defined(X)\n.endif\n", true},
		{"global\n  .if streq(a,b)\n  .endif\n", true},
		{"global\n\t.else\n", true},
		{"global\n    # .if in a comment\n", false},
		{"", false},
		{"x\n.endif", true},
	} {
		if got := conditional([]byte(tc.cfg)); got != tc.want {
			t.Errorf("conditional(%q) = %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

// TestLineFactsAnswerAsAWholeRead: along a chain of files, each a random
// edit of the one before (as each Apply's old file is the last one's new
// file, the same bytes), diffConfigLines knowing the old file's facts
// answers as it does reading both files whole, while the edits add and
// drop conditional blocks and default-server lines anywhere.
func TestLineFactsAnswerAsAWholeRead(t *testing.T) {
	t.Parallel()
	lines := strings.Split(cfgBase+"backend big\n", "\n")
	for i := range 100 {
		lines = append(lines, fmt.Sprintf("    server s%d 10.1.%d.%d:80 check", i, i/250, i%250))
	}
	edits := []func(r *rand.Rand, l []string) []string{
		func(r *rand.Rand, l []string) []string { // a server's address
			k := r.IntN(len(l))
			l[k] = strings.Replace(l[k], "10.", fmt.Sprintf("10.%d", r.IntN(9)), 1)
			return l
		},
		func(r *rand.Rand, l []string) []string { // a conditional block
			return slices.Insert(l, r.IntN(len(l)), ".if defined(X)", ".endif")
		},
		func(r *rand.Rand, l []string) []string { // a default-server line
			return slices.Insert(l, r.IntN(len(l)), "    default-server weight 5")
		},
		func(r *rand.Rand, l []string) []string { // drop what the others added
			return slices.DeleteFunc(l, func(s string) bool {
				return strings.HasPrefix(s, ".") || strings.Contains(s, "default-server") && r.IntN(2) == 0
			})
		},
	}
	r := rand.New(rand.NewPCG(3, 4))
	var facts lineFacts
	old := []byte(strings.Join(lines, "\n"))
	for step := range 2000 {
		edit := edits[0]
		if r.IntN(4) == 0 {
			edit = edits[r.IntN(len(edits))]
		}
		lines = edit(r, slices.Clone(lines))
		cand := []byte(strings.Join(lines, "\n"))
		got, gotOK, gotErr := diffConfigLines(old, cand, &facts)
		want, wantOK, wantErr := diffConfigLines(slices.Clone(old), slices.Clone(cand), nil)
		if gotOK != wantOK || (gotErr == nil) != (wantErr == nil) || !slices.Equal(opsOf(got), opsOf(want)) {
			t.Fatalf("step %d: knowing the old file's facts: %q, %v, %v; reading both whole: %q, %v, %v",
				step, opsOf(got), gotOK, gotErr, opsOf(want), wantOK, wantErr)
		}
		old = cand
	}
}
