package engine

import "testing"

// TestSplitMethods checks split and splitlines against Python's results,
// and that their items compare equal to plain strings.
func TestSplitMethods(t *testing.T) {
	for tpl, want := range map[string]string{
		`{{ "a b  c ".split() }}`:                                    `['a', 'b', 'c']`,
		`{{ " a b c".split(None, 1) }}`:                              `['a', 'b c']`,
		`{{ "a,b,,c".split(",") }}`:                                  `['a', 'b', '', 'c']`,
		`{{ "a,b,c".split(",", 1) }}`:                                `['a', 'b,c']`,
		`{{ "a,b,c".split(sep=",", maxsplit=1) }}`:                   `['a', 'b,c']`,
		`{{ "".split(",") }}|{{ "".split() }}`:                       `['']|[]`,
		`{{ "a\nb\r\nc\rd\n\ne".splitlines() }}`:                     `['a', 'b', 'c', 'd', '', 'e']`,
		`{{ ("a\nb\n".splitlines(True) | join("|")) == "a\n|b\n" }}`: `True`,
		`{{ "".splitlines() }}|{{ "x".splitlines() }}`:               `[]|['x']`,
		`{{ "a b".split()[0] == "a" }}`:                              `True`,
		`{{ "a\nb".splitlines() | reject("equalto", "a") | list }}`:  `['b']`,
	} {
		if got, err := render(t, nil, tpl, Input{}); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", tpl, got, err, want)
		}
	}
}
