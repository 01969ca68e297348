package runtime

import "sync"

// lineFacts remembers, for the main file compared last, whether any of its
// lines is one diffConfigLines looks for in the whole of both files (a
// conditional block, a default-server line that bears on server changes).
// The next Apply's old file is that file, the same bytes (diskMemo hands
// back what was written), and shares all but a few lines with the new one:
// when the old file has none, only the lines that differ are looked at,
// not the whole of two large files. A nil *lineFacts remembers nothing.
type lineFacts struct {
	mu    sync.Mutex
	facts [factKinds]lineFact
}

// lineFact is has's answer on the whole of of.
type lineFact struct {
	of  []byte
	has bool
}

// The facts diffConfigLines looks for.
const (
	factConditional = iota
	factServerDefaults
	factKinds
)

// inEither is inEither for the fact kind, whose test is has: from what is
// known of a (when a is the file last asked about), else by reading both;
// either way it then knows b.
func (f *lineFacts) inEither(kind int, a, b []byte, start, endA, endB int, has func([]byte) bool) bool {
	if f == nil {
		return inEither(a, b, start, endA, endB, has)
	}
	known, ok := f.of(kind, a)
	if ok && !known {
		// No line of a has it, so neither have the lines b shares with
		// a: b has it exactly when its differing lines do.
		inB := has(b[start:endB])
		f.learn(kind, b, inB)
		return inB || has(a[start:endA])
	}
	before, mid, after := has(b[:start]), has(b[start:endB]), has(b[endB:])
	f.learn(kind, b, before || mid || after)
	return before || mid || after || has(a[start:endA])
}

// of returns what is known of content for kind.
func (f *lineFacts) of(kind int, content []byte) (has, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.facts[kind]
	return k.has, sameBytes(k.of, content)
}

func (f *lineFacts) learn(kind int, content []byte, has bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.facts[kind] = lineFact{of: content, has: has}
}

// sameBytes reports whether a and b are the same bytes in memory, not
// merely equal ones.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}
