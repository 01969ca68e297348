// Package envflag gives command-line flags their defaults from WEFT_*
// environment variables: a flag given on the command line wins, then the
// variable, then the default. A variable set to a value its flag cannot
// take (a duration that does not parse) is not silently dropped: Err
// names each one, for the command to report as a usage error.
package envflag

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Defaults reads the variables. Its zero value is ready to use.
type Defaults struct {
	errs []error
}

// String is key's value when set (even empty), else def.
func (d *Defaults) String(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// Int is key's value when it is a whole number, else def.
func (d *Defaults) Int(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

// Bool is key's value when it is a boolean (strconv.ParseBool), else def.
func (d *Defaults) Bool(key string, def bool) bool {
	if v, err := strconv.ParseBool(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

// Duration is key's value when set, else def; a value that does not
// parse is kept for Err and def is used.
func (d *Defaults) Duration(key string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	p, err := time.ParseDuration(v)
	if err != nil {
		d.errs = append(d.errs, fmt.Errorf("%s=%q is not a duration (such as 10s)", key, v))
		return def
	}
	return p
}

// Err names every variable whose value could not be taken; nil when none.
func (d *Defaults) Err() error { return errors.Join(d.errs...) }
