package envflag_test

import (
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/svc/envflag"
)

func TestDefaults(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		str     string
		n       int
		b       bool
		d       time.Duration
		wantErr string
	}{
		{name: "unset: the defaults", str: "def", n: 3, b: true, d: time.Second},
		{name: "set", env: map[string]string{"WEFT_T_S": "x", "WEFT_T_N": "7", "WEFT_T_B": "false", "WEFT_T_D": "250ms"}, str: "x", n: 7, b: false, d: 250 * time.Millisecond},
		{name: "set empty", env: map[string]string{"WEFT_T_S": ""}, str: "", n: 3, b: true, d: time.Second},
		{name: "a duration that does not parse", env: map[string]string{"WEFT_T_D": "soon"}, str: "def", n: 3, b: true, d: time.Second,
			wantErr: `WEFT_T_D="soon" is not a duration`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var d envflag.Defaults
			if got := d.String("WEFT_T_S", "def"); got != tc.str {
				t.Errorf("String = %q, want %q", got, tc.str)
			}
			if got := d.Int("WEFT_T_N", 3); got != tc.n {
				t.Errorf("Int = %d, want %d", got, tc.n)
			}
			if got := d.Bool("WEFT_T_B", true); got != tc.b {
				t.Errorf("Bool = %v, want %v", got, tc.b)
			}
			if got := d.Duration("WEFT_T_D", time.Second); got != tc.d {
				t.Errorf("Duration = %v, want %v", got, tc.d)
			}
			err := d.Err()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
