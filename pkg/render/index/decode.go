package index

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unique"
)

// Decode decodes one JSON object the way templates want it: integers
// become int (float64 only for numbers with a fraction or exponent, or
// beyond int's range), so a port renders as 80 rather than 80.0, as it
// does in Jinja2. It reads what encoding/json's Unmarshal reads (with
// UseNumber, then Normalize), into the same tree, and refuses what it
// refuses, without its reflection: the Index decodes every object it
// hands out from its JSON. Map keys are interned, as Normalize does.
func Decode(data []byte) (map[string]any, error) {
	d := decoder{data: data}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	d.space()
	if d.i < len(d.data) {
		return nil, errors.New("decode object: trailing data after the object")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("decode object: not a JSON object")
	}
	return m, nil
}

// keys interns object keys: objects of one kind repeat the same keys, and
// a key found here costs no allocation. It holds at most maxKeys (the keys
// of label and annotation maps are the open-ended part).
var keys = struct {
	sync.RWMutex
	m map[string]string
}{m: map[string]string{}}

const maxKeys = 1 << 14

func internKey(b []byte) string {
	keys.RLock()
	s, ok := keys.m[string(b)]
	keys.RUnlock()
	if ok {
		return s
	}
	s = unique.Make(string(b)).Value()
	keys.Lock()
	if len(keys.m) < maxKeys {
		keys.m[s] = s
	}
	keys.Unlock()
	return s
}

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

var errDepth = errors.New("exceeded max depth")

// decoder reads one JSON text from data at i.
type decoder struct {
	data []byte
	i    int
}

func (d *decoder) errorAt(what string) error {
	if d.i >= len(d.data) {
		return errors.New("unexpected end of JSON input")
	}
	return fmt.Errorf("invalid character %q at offset %d %s", d.data[d.i], d.i, what)
}

func (d *decoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// value reads the value at i (no space before it).
func (d *decoder) value(depth int) (any, error) {
	if d.i >= len(d.data) {
		return nil, d.errorAt("")
	}
	switch c := d.data[d.i]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		b, err := d.strBytes()
		return string(b), err
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, d.errorAt("looking for beginning of value")
}

func (d *decoder) literal(word string) error {
	if len(d.data)-d.i < len(word) || string(d.data[d.i:d.i+len(word)]) != word {
		for k := 1; k < len(word) && d.i+k < len(d.data); k++ {
			if d.data[d.i+k] != word[k] {
				d.i += k
				return d.errorAt("in literal " + word)
			}
		}
		d.i = len(d.data)
		return d.errorAt("")
	}
	d.i += len(word)
	return nil
}

func (d *decoder) object(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errDepth
	}
	d.i++ // {
	m := map[string]any{}
	d.space()
	if d.i < len(d.data) && d.data[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		if d.i >= len(d.data) || d.data[d.i] != '"' {
			return nil, d.errorAt("looking for beginning of object key string")
		}
		k, err := d.strBytes()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.data) || d.data[d.i] != ':' {
			return nil, d.errorAt("after object key")
		}
		d.i++
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		m[internKey(k)] = v
		if end, err := d.next('}', "after object key:value pair"); end || err != nil {
			return m, err
		}
	}
}

func (d *decoder) array(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errDepth
	}
	d.i++ // [
	a := []any{}
	d.space()
	if d.i < len(d.data) && d.data[d.i] == ']' {
		d.i++
		return a, nil
	}
	for {
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		if end, err := d.next(']', "after array element"); end || err != nil {
			return a, err
		}
	}
}

// next reads what follows a member of an object or array: a comma (and
// the space after it), or its closing byte (end).
func (d *decoder) next(closing byte, where string) (end bool, err error) {
	d.space()
	switch {
	case d.i >= len(d.data):
		return false, d.errorAt("")
	case d.data[d.i] == ',':
		d.i++
		d.space()
		return false, nil
	case d.data[d.i] == closing:
		d.i++
		return true, nil
	}
	return false, d.errorAt(where)
}

// number reads a number as UseNumber and Normalize make it: int when
// strconv.ParseInt takes it, else float64 when ParseFloat does, else (out
// of float64's range) its text.
func (d *decoder) number() (any, error) {
	start := d.i
	if d.data[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.data) && d.data[d.i] == '0':
		d.i++
	case d.i < len(d.data) && d.data[d.i] >= '1' && d.data[d.i] <= '9':
		d.digits()
	default:
		return nil, d.errorAt("in numeric literal")
	}
	integer := true
	if d.i < len(d.data) && d.data[d.i] == '.' {
		integer = false
		d.i++
		if !d.digits() {
			return nil, d.errorAt("after decimal point in numeric literal")
		}
	}
	if d.i < len(d.data) && (d.data[d.i] == 'e' || d.data[d.i] == 'E') {
		integer = false
		d.i++
		if d.i < len(d.data) && (d.data[d.i] == '+' || d.data[d.i] == '-') {
			d.i++
		}
		if !d.digits() {
			return nil, d.errorAt("in exponent of numeric literal")
		}
	}
	text := d.data[start:d.i]
	if integer {
		if n, ok := atoi(text); ok {
			return n, nil
		}
	}
	s := string(text)
	if integer {
		if n, err := strconv.ParseInt(s, 10, 0); err == nil {
			return int(n), nil
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f, nil
	}
	return s, nil
}

// atoi reads a short integer without a string: at most 18 digits cannot
// overflow an int64.
func atoi(text []byte) (int, bool) {
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	if len(text) > 18 || strconv.IntSize < 64 {
		return 0, false
	}
	n := 0
	for _, c := range text {
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// digits skips digits and reports whether there was one.
func (d *decoder) digits() bool {
	start := d.i
	for d.i < len(d.data) && d.data[d.i] >= '0' && d.data[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

// strBytes reads a string at i (its opening quote) as encoding/json does:
// escapes resolved, invalid UTF-8 and lone surrogates replaced by U+FFFD,
// control characters refused. Without escapes, it is a slice of data.
func (d *decoder) strBytes() ([]byte, error) {
	d.i++ // "
	start := d.i
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			return d.data[start : d.i-1], nil
		case c == '\\' || c >= utf8.RuneSelf:
			return d.strSlow(start)
		case c < ' ':
			return nil, d.errorAt("in string literal")
		}
		d.i++
	}
	return nil, d.errorAt("")
}

// strSlow finishes a string that has escapes or bytes beyond ASCII.
func (d *decoder) strSlow(start int) ([]byte, error) {
	out := make([]byte, 0, d.i-start+16)
	out = append(out, d.data[start:d.i]...)
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			return out, nil
		case c < ' ':
			return nil, d.errorAt("in string literal")
		case c == '\\':
			d.i++
			if d.i >= len(d.data) {
				return nil, d.errorAt("")
			}
			switch e := d.data[d.i]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, err := d.hex4()
				if err != nil {
					return nil, err
				}
				if utf16.IsSurrogate(r) {
					r2, ok := d.lowSurrogate()
					if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
						r = dec
						d.i += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
				continue // hex4 left i after the escape
			default:
				return nil, d.errorAt("in string escape code")
			}
			d.i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			d.i++
		default:
			r, size := utf8.DecodeRune(d.data[d.i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, d.data[d.i:d.i+size]...)
			}
			d.i += size
		}
	}
	return nil, d.errorAt("")
}

// hex4 reads the four hex digits after `\u` (i at the u) and leaves i
// after them.
func (d *decoder) hex4() (rune, error) {
	d.i++ // u
	var r rune
	for k := range 4 {
		if d.i+k >= len(d.data) {
			d.i = len(d.data)
			return 0, d.errorAt("")
		}
		v, ok := hexDigit(d.data[d.i+k])
		if !ok {
			d.i += k
			return 0, d.errorAt("in \\u hexadecimal character escape")
		}
		r = r<<4 | v
	}
	d.i += 4
	return r, nil
}

// hexDigit is the value of one hexadecimal digit.
func hexDigit(c byte) (rune, bool) {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0'), true
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10), true
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10), true
	}
	return 0, false
}

// lowSurrogate peeks at a `\uXXXX` right at i, as the second half of a
// surrogate pair, without moving.
func (d *decoder) lowSurrogate() (rune, bool) {
	if len(d.data)-d.i < 6 || d.data[d.i] != '\\' || d.data[d.i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.i+2 : d.i+6] {
		v, ok := hexDigit(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | v
	}
	return r, true
}
