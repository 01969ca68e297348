package confd

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/weftio/weft/pkg/config/confdir"
)

var (
	// ErrConfig matches (errors.Is) every error about a template resource
	// file: TOML that does not parse, a missing or invalid field, a
	// template that cannot be read or parsed (confdir.ErrConfig).
	ErrConfig = confdir.ErrConfig
	// ErrTemplate matches every error of a template: one that does not
	// parse (unknown function, syntax) and one that fails while rendering
	// (missing key, failing function).
	ErrTemplate = errors.New("template error")
	// ErrEmptySrc is a resource without src (confd's message).
	ErrEmptySrc = confdir.ErrEmptySrc
	// ErrEmptyDest is a resource without dest.
	ErrEmptyDest = confdir.ErrEmptyDest
	// ErrNotLoaded is Render on a Resource that LoadConfdir did not make.
	ErrNotLoaded = errors.New("resource has no template: load it with LoadConfdir")
)

// ConfigError is a problem with one template resource file (see
// confdir.ConfigError): File is the conf.d file, Field the offending field,
// Line the line when known. It matches ErrConfig.
type ConfigError = confdir.ConfigError

// TemplateError is a template that does not parse or fails to render.
// File is the template's path, Line the line text/template reports (0 when
// it reports none). Err is text/template's own error, whose text is the
// one confd shows, for instance
//
//	template: app.tmpl:3:4: executing "app.tmpl" at <getv "/x">: error calling getv: key does not exist: /x
//
// Err keeps its chain: errors.Is(err, ErrNotExist) holds for a missing
// key. TemplateError matches ErrTemplate.
type TemplateError struct {
	File string
	Line int
	Err  error
}

func (e *TemplateError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

// Unwrap returns Err.
func (e *TemplateError) Unwrap() error { return e.Err }

// Is matches ErrTemplate.
func (e *TemplateError) Is(target error) bool { return target == ErrTemplate }

// templateLocation finds the line in text/template's messages:
// "template: NAME:LINE: ..." (parse) and "template: NAME:LINE:COL: ..."
// (execution).
var templateLocation = regexp.MustCompile(`^template: .*?:(\d+):`)

func newTemplateError(file string, err error) *TemplateError {
	te := &TemplateError{File: file, Err: err}
	if m := templateLocation.FindStringSubmatch(err.Error()); m != nil {
		te.Line, _ = strconv.Atoi(m[1])
	}
	return te
}
