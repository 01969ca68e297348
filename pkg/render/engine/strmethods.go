package engine

import (
	"errors"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// gonjaStrMethods are the string methods of gonja v2.9.1 (its method set
// cannot be listed).
var gonjaStrMethods = []string{
	"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith", "expandtabs",
	"find", "format", "format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
	"islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust",
	"lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rjust",
	"rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
	"title", "upper", "zfill",
}

// strMethods are gonja's string methods with split and splitlines
// returning plain strings: gonja's return its own string type, which
// compares unequal to plain strings (`"a b".split()[0] == "a"` is false)
// and costs a conversion at every use.
func strMethods() *exec.MethodSet[string] {
	m := make(map[string]exec.Method[string], len(gonjaStrMethods))
	for _, name := range gonjaStrMethods {
		if fn, ok := builtins.Methods.Str.Get(name); ok {
			m[name] = fn
		}
	}
	m["split"] = strSplit
	m["splitlines"] = strSplitLines
	return exec.NewMethodSet(m)
}

// strSplit is Python's str.split(sep=None, maxsplit=-1).
func strSplit(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	sep, maxsplit := exec.AsValue(nil), -1
	if len(args.Args) > 2 {
		return nil, exec.ErrInvalidCall(errors.New("split() takes at most 2 arguments"))
	}
	if len(args.Args) > 0 {
		sep = args.Args[0]
	}
	if v, ok := args.KwArgs["sep"]; ok {
		sep = v
	}
	mv := exec.AsValue(-1)
	if len(args.Args) > 1 {
		mv = args.Args[1]
	}
	if v, ok := args.KwArgs["maxsplit"]; ok {
		mv = v
	}
	if !mv.IsInteger() {
		return nil, exec.ErrInvalidCall(errors.New("split() maxsplit must be an integer"))
	}
	maxsplit = mv.Integer()
	if sep.IsNil() {
		return splitFields(self, maxsplit), nil
	}
	if sep.String() == "" {
		return nil, errors.New("split(): empty separator")
	}
	if maxsplit < 0 {
		return strings.Split(self, sep.String()), nil
	}
	return strings.SplitN(self, sep.String(), maxsplit+1), nil
}

// splitFields splits s at runs of white space, at most maxsplit times
// (negative: no limit), as str.split() without a separator does.
func splitFields(s string, maxsplit int) []string {
	out := []string{}
	for {
		s = strings.TrimLeft(s, " \t\n\r\v\f")
		if s == "" {
			return out
		}
		if maxsplit >= 0 && len(out) == maxsplit {
			return append(out, strings.TrimRight(s, " \t\n\r\v\f"))
		}
		i := strings.IndexAny(s, " \t\n\r\v\f")
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i])
		s = s[i:]
	}
}

// lineBreak returns the length of the line boundary of Python's
// str.splitlines() at the start of s, 0 when there is none.
func lineBreak(s string) int {
	switch {
	case strings.HasPrefix(s, "\r\n"):
		return 2
	case s[0] == '\n' || s[0] == '\r' || s[0] == '\v' || s[0] == '\f' || s[0] >= 0x1c && s[0] <= 0x1e:
		return 1
	case strings.HasPrefix(s, "\u0085"):
		return len("\u0085")
	case strings.HasPrefix(s, "\u2028") || strings.HasPrefix(s, "\u2029"):
		return len("\u2028")
	}
	return 0
}

// strSplitLines is Python's str.splitlines(keepends=False).
func strSplitLines(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	keep := exec.AsValue(false)
	if len(args.Args) > 1 {
		return nil, exec.ErrInvalidCall(errors.New("splitlines() takes at most 1 argument"))
	}
	if len(args.Args) == 1 {
		keep = args.Args[0]
	}
	if v, ok := args.KwArgs["keepends"]; ok {
		keep = v
	}
	out := make([]string, 0, strings.Count(self, "\n")+1)
	start := 0
	for i := 0; i < len(self); {
		n := lineBreak(self[i:])
		if n == 0 {
			i++
			continue
		}
		end := i
		if keep.IsTrue() {
			end = i + n
		}
		out = append(out, self[start:end])
		i += n
		start = i
	}
	if start < len(self) {
		out = append(out, self[start:])
	}
	return out, nil
}
