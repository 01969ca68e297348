package confdir

import (
	"errors"
	"fmt"
	"strconv"
)

var (
	// ErrConfig matches (errors.Is) every error about a template resource
	// file: TOML that does not parse, a missing or invalid field, a
	// template that is missing (or, in the renderer, does not parse).
	ErrConfig = errors.New("invalid template resource")
	// ErrEmptySrc is a resource without src (confd's message).
	ErrEmptySrc = errors.New("empty src template")
	// ErrEmptyDest is a resource without dest.
	ErrEmptyDest = errors.New("empty dest")
)

// ConfigError is a problem with one template resource file. File is the
// conf.d file; Field the offending field of its [template] table ("src",
// "mode", ...) when one is to blame; Line the line in the file when known.
// It matches ErrConfig and unwraps to Err.
type ConfigError struct {
	File  string
	Field string
	Line  int
	Err   error
}

func (e *ConfigError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %v", loc, e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %v", loc, e.Err)
}

// Unwrap returns Err.
func (e *ConfigError) Unwrap() error { return e.Err }

// Is matches ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }
