package confd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"unicode"
)

// utilityFuncs is the layer of general helpers the maintained confd puts
// under its own functions: defaults and conditionals, JSON, formatting,
// regular expressions, string case, collections and hashing. Templates
// written for confd 0.16 never use them; templates written for the
// maintained confd may.
func utilityFuncs() template.FuncMap {
	return template.FuncMap{
		"default":         defaultValue,
		"ternary":         ternary,
		"coalesce":        coalesce,
		"empty":           isEmpty,
		"toJson":          toJSON,
		"fromJson":        fromJSON,
		"toPrettyJson":    toPrettyJSON,
		"indent":          indent,
		"nindent":         nindent,
		"quote":           quote,
		"squote":          squote,
		"regexMatch":      regexMatch,
		"regexFind":       regexFind,
		"regexReplaceAll": regexReplaceAll,
		"trimPrefix":      strings.TrimPrefix,
		"repeat":          repeat,
		"nospace":         nospace,
		"snakecase":       snakecase,
		"camelcase":       camelcase,
		"kebabcase":       kebabcase,
		"dict":            createMap,
		"list":            list,
		"hasKey":          hasKey,
		"keys":            mapKeys,
		"values":          mapValues,
		"append":          appendList,
		"pluck":           pluck,
		"sha256sum":       sha256sum,
	}
}

// isEmpty is true for nil, false, zero numbers, empty strings, slices,
// arrays and maps, nil pointers and interfaces, and zero structs.
func isEmpty(val any) bool {
	if val == nil {
		return true
	}
	v := reflect.ValueOf(val)
	switch v.Kind() {
	case reflect.String, reflect.Array, reflect.Slice, reflect.Map:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	case reflect.Struct:
		return v.IsZero()
	default:
		return false
	}
}

// defaultValue returns val unless it is empty (isEmpty), then def; the
// argument order suits a pipeline: {{getv "/x" "" | default "y"}}.
func defaultValue(def, val any) any {
	if isEmpty(val) {
		return def
	}
	return val
}

// ternary takes the condition last, for pipelines.
func ternary(trueVal, falseVal any, cond bool) any {
	if cond {
		return trueVal
	}
	return falseVal
}

// coalesce returns the first argument that is not empty, or nil.
func coalesce(vals ...any) any {
	for _, v := range vals {
		if !isEmpty(v) {
			return v
		}
	}
	return nil
}

func toJSON(val any) (string, error) {
	b, err := json.Marshal(val)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func fromJSON(s string) (any, error) {
	var out any
	err := json.Unmarshal([]byte(s), &out)
	return out, err
}

func toPrettyJSON(val any) (string, error) {
	b, err := json.MarshalIndent(val, "", "  ")
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// indent puts spaces (negative counts as 0) before every line of s; an
// empty s stays empty.
func indent(spaces int, s string) string {
	if s == "" {
		return ""
	}
	pad := strings.Repeat(" ", max(spaces, 0))
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

// nindent is indent after a newline; an empty s gives "\n".
func nindent(spaces int, s string) string {
	return "\n" + indent(spaces, s)
}

// quote writes s as a Go double-quoted string (%q).
func quote(s string) string { return strconv.Quote(s) }

// squote wraps s in single quotes and doubles the single quotes inside.
func squote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func regexMatch(pattern, s string) (bool, error) {
	return regexp.MatchString(pattern, s)
}

func regexFind(pattern, s string) (string, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return "", err
	}
	return re.FindString(s), nil
}

func regexReplaceAll(pattern, s, repl string) (string, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return "", err
	}
	return re.ReplaceAllString(s, repl), nil
}

// repeat takes the count first, for pipelines; a count of 0 or less gives "".
func repeat(count int, s string) string {
	if count <= 0 {
		return ""
	}
	return strings.Repeat(s, count)
}

func nospace(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}

// splitWords cuts s into words at '_', '-' and ' ', and before an upper
// case letter that follows a non-upper-case one ("fooBar": foo, Bar) or
// that starts a capitalised word after an acronym ("HTTPServer": HTTP,
// Server). Digits stay with the letters before them.
func splitWords(s string) []string {
	runes := []rune(s)
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, string(cur))
			cur = nil
		}
	}
	for i, r := range runes {
		if r == '_' || r == '-' || r == ' ' {
			flush()
			continue
		}
		if unicode.IsUpper(r) && len(cur) > 0 {
			nextLower := i+1 < len(runes) && unicode.IsLower(runes[i+1])
			if nextLower || !unicode.IsUpper(runes[i-1]) {
				flush()
			}
		}
		cur = append(cur, r)
	}
	flush()
	return words
}

func snakecase(s string) string {
	words := splitWords(s)
	for i, w := range words {
		words[i] = strings.ToLower(w)
	}
	return strings.Join(words, "_")
}

func kebabcase(s string) string {
	words := splitWords(s)
	for i, w := range words {
		words[i] = strings.ToLower(w)
	}
	return strings.Join(words, "-")
}

// camelcase lower-cases the first word and capitalises the first letter
// of the others: "http_server_name" is "httpServerName".
func camelcase(s string) string {
	words := splitWords(s)
	for i, w := range words {
		lower := []rune(strings.ToLower(w))
		if i > 0 && len(lower) > 0 {
			lower[0] = unicode.ToUpper(lower[0])
		}
		words[i] = string(lower)
	}
	return strings.Join(words, "")
}

func list(vals ...any) []any { return vals }

func hasKey(m map[string]any, key string) bool {
	_, ok := m[key]
	return ok
}

// mapKeys returns the keys of m sorted (template function keys).
func mapKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// mapValues returns the values of m in the order of its sorted keys
// (template function values).
func mapValues(m map[string]any) []any {
	ks := mapKeys(m)
	out := make([]any, len(ks))
	for i, k := range ks {
		out[i] = m[k]
	}
	return out
}

// appendList is the template function append: it returns l with val added
// (sharing l's array when it has room, as Go's append does).
func appendList(l []any, val any) []any { return append(l, val) }

// pluck collects the value of key from each map that has it.
func pluck(key string, maps ...map[string]any) []any {
	var out []any
	for _, m := range maps {
		if v, ok := m[key]; ok {
			out = append(out, v)
		}
	}
	return out
}

func sha256sum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
