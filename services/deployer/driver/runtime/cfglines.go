package runtime

import (
	"bytes"
	"slices"
)

// diffConfigLines is diffConfig for the usual change, a few lines of a
// large file: the files are compared as bytes, and only the lines between
// their common prefix and suffix, the section header above them and the
// default-server lines are split into words, so a change costs what it
// touches rather than what the file holds. ok is false when it cannot
// decide alone (lines added or removed, a section header among the changed
// lines, conditional blocks anywhere); diffConfigParsed then decides, with
// its exact explanation. When ok, its answer is diffConfigParsed's.
func diffConfigLines(oldB, newB []byte, facts *lineFacts) (changes []serverChange, ok bool, err error) {
	start, endOld, endNew := middle(oldB, newB)
	if facts.inEither(factConditional, oldB, newB, start, endOld, endNew, conditional) {
		return nil, false, nil
	}
	oldM, newM := splitLines(oldB[start:endOld]), splitLines(newB[start:endNew])
	if len(oldM) != len(newM) {
		return nil, false, nil
	}
	// The section the first middle line is in: the last header above it
	// (the same in both files: everything above is byte-identical).
	cur := section{}
	for i := start; i > 0; {
		j := bytes.LastIndexByte(newB[:i-1], '\n') + 1
		if words := splitWords(string(newB[j : i-1])); len(words) > 0 && sectionKeywords[words[0]] {
			cur = headerSection(words)
			break
		}
		i = j
	}
	num := bytes.Count(newB[:start], []byte{'\n'})
	var defaultsTouch *bool
	for k := range newM {
		num++
		oRaw, nRaw := oldM[k], newM[k]
		if bytes.Equal(oRaw, nRaw) {
			if words := splitWords(string(nRaw)); len(words) > 0 && sectionKeywords[words[0]] {
				cur = headerSection(words)
			}
			continue
		}
		ow, nw := splitWords(string(oRaw)), splitWords(string(nRaw))
		if slices.Equal(ow, nw) { // comments or spacing
			if len(nw) > 0 && sectionKeywords[nw[0]] {
				cur = headerSection(nw)
			}
			continue
		}
		if len(ow) == 0 || len(nw) == 0 || sectionKeywords[ow[0]] || sectionKeywords[nw[0]] {
			return nil, false, nil // lines or sections added, removed or renamed
		}
		ol, nl := cfgLine{num: num, words: ow}, cfgLine{num: num, words: nw}
		isServer := (cur.kind == "backend" || cur.kind == "listen") &&
			ow[0] == "server" && nw[0] == "server" && len(ow) > 1 && len(nw) > 1 && ow[1] == nw[1]
		if !isServer {
			return nil, true, structuref("%s: line %d %q changed", sectionName(cur), num, nl)
		}
		if defaultsTouch == nil {
			t := facts.inEither(factServerDefaults, oldB, newB, start, endOld, endNew, serverDefaultsSet)
			defaultsTouch = &t
		}
		ch, err := diffServer(cur.name, ol, nl, *defaultsTouch)
		if err != nil {
			return nil, true, err
		}
		changes = append(changes, ch)
	}
	return changes, true, nil
}

// headerSection is the section a header line's words start.
func headerSection(words []string) section {
	s := section{kind: words[0], header: cfgLine{words: words}}
	if len(words) > 1 {
		s.name = words[1]
	}
	return s
}

// conditional reports whether b may hold .if/.elif/.else/.endif lines:
// any line whose first word starts with a dot (a false alarm only costs
// the whole parse).
func conditional(b []byte) bool {
	for len(b) > 0 {
		i := 0
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		if i < len(b) && b[i] == '.' {
			return true
		}
		n := bytes.IndexByte(b[i:], '\n')
		if n < 0 {
			return false
		}
		b = b[i+n+1:]
	}
	return false
}

// middle returns where the bytes of a and b stop being the same, backed up
// to a line start, and where their common suffix starts in each, moved on
// to a line start: a[start:endA] and b[start:endB] are the whole lines that
// differ (both empty when a and b are equal).
func middle(a, b []byte) (start, endA, endB int) {
	p := commonPrefix(a, b)
	if p == len(a) && p == len(b) {
		return p, p, p
	}
	start = bytes.LastIndexByte(a[:p], '\n') + 1
	s := commonSuffix(a[start:], b[start:])
	endA, endB = len(a)-s, len(b)-s
	// Move the ends on, in step (what follows them is the same in both),
	// until both are at a line start or at the end.
	for endA < len(a) && !(lineStart(a, endA) && lineStart(b, endB)) {
		endA++
		endB++
	}
	return start, endA, endB
}

func lineStart(b []byte, i int) bool { return i == 0 || b[i-1] == '\n' }

// inEither reports whether any line of a or of b has what has reports of
// a run of whole lines, given that a and b differ only in a[start:endA]
// and b[start:endB] (middle): the lines they share are read once.
func inEither(a, b []byte, start, endA, endB int, has func([]byte) bool) bool {
	return has(b[:start]) || has(a[start:endA]) || has(b[start:endB]) || has(b[endB:])
}

// commonPrefix returns how many bytes a and b share at the front.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	const block = 4096 // bytes.Equal on blocks is far faster than a loop
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

// splitLines splits b into lines without their line feeds (an empty b has
// no lines; a last line without a line feed is a line).
func splitLines(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	lines := bytes.Split(b, []byte{'\n'})
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// serverDefaultsSet is touchesServerDefaults on a file's default-server
// lines alone.
func serverDefaultsSet(b []byte) bool {
	key := []byte("default-server")
	var c config
	for {
		i := bytes.Index(b, key)
		if i < 0 {
			return touchesServerDefaults(c)
		}
		start := bytes.LastIndexByte(b[:i], '\n') + 1
		end := len(b)
		if n := bytes.IndexByte(b[i:], '\n'); n >= 0 {
			end = i + n
		}
		if words := splitWords(string(b[start:end])); len(words) > 0 && words[0] == "default-server" {
			c.sections = append(c.sections, section{lines: []cfgLine{{words: words}}})
		}
		b = b[end:]
	}
}
