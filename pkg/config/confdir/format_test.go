package confdir

import (
	"errors"
	"testing"
)

func TestCheckFormat(t *testing.T) {
	tests := []struct {
		format, content string
		ok              bool
	}{
		{"", "anything {", true},
		{"json", `{"a": [1, 2]}`, true},
		{"json", `{"a": }`, false},
		{"toml", "a = 1\n[b]\nc = \"x\"\n", true},
		{"toml", "a = \n", false},
		{"yaml", "a: [1, 2]\nb: x\n", true},
		{"yml", "a: [1, 2\n", false},
		{"xml", "<a><b x=\"1\">t</b></a>", true},
		{"xml", "<a><b></a>", false},
		{"xml", "<a/><b/>", false},
		{"xml", "", false},
		{"ini", "a=1", false},
	}
	for _, tc := range tests {
		t.Run(tc.format+" "+tc.content, func(t *testing.T) {
			err := CheckFormat(tc.format, []byte(tc.content))
			if tc.ok && err != nil {
				t.Errorf("CheckFormat: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrFormat) {
				t.Errorf("CheckFormat = %v, want ErrFormat", err)
			}
		})
	}
}
