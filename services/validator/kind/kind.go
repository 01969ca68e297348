// Package kind holds the validator kinds. A kind looks at one bundle and
// returns its problems; it returns an error only when it could not decide
// (the haproxy binary is missing, a timeout), which the gatherer reports as
// that kind not having accepted the bundle. Kinds are stateless and safe for
// concurrent use.
package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/config/confdir"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/services/validator/fastpath"
	"github.com/weftio/weft/services/validator/haproxycheck"
)

// Names of the kinds.
const (
	Template = "template"
	HAProxy  = "haproxy"
)

// Checker is one validator kind.
type Checker interface {
	Name() string
	Check(ctx context.Context, b msg.Bundle) ([]msg.Problem, error)
}

// Failed reports whether problems hold an error (not just warnings).
func Failed(problems []msg.Problem) bool {
	for _, p := range problems {
		if p.Severity != "warning" {
			return true
		}
	}
	return false
}

// TemplateChecker checks what rendering must guarantee regardless of the
// program that reads the bundle: a non-empty main file, text files that are
// UTF-8 without NUL bytes, map files whose lines are "key value", and no
// template syntax left unrendered (a warning: rarely intended). When
// Formats names a syntax for the bundle's target (a confd resource's
// output_format: json, toml, xml, yaml), the main file must have it.
type TemplateChecker struct {
	// Formats maps a target name to the syntax of its main file.
	Formats map[string]string
}

// NewTemplateChecker is the template kind for cfg: the output_format of
// every target made from a confd resource.
func NewTemplateChecker(cfg *config.Config) TemplateChecker {
	tc := TemplateChecker{Formats: map[string]string{}}
	for name, t := range cfg.Targets {
		if t.ConfdResource != nil && t.ConfdResource.OutputFormat != "" {
			tc.Formats[name] = t.ConfdResource.OutputFormat
		}
	}
	return tc
}

func (TemplateChecker) Name() string { return Template }

func (tc TemplateChecker) Check(_ context.Context, b msg.Bundle) ([]msg.Problem, error) {
	var out []msg.Problem
	add := func(file string, line int, sev, f string, args ...any) {
		out = append(out, msg.Problem{File: file, Line: line, Severity: sev, Message: fmt.Sprintf(f, args...)})
	}
	for _, f := range b.Files {
		if format := tc.Formats[b.Target]; format != "" && f.Path == b.Main {
			if err := confdir.CheckFormat(format, f.Content); err != nil {
				add(f.Path, 0, "error", "%v", err)
			}
		}
		if f.Path == b.Main && len(bytes.TrimSpace(f.Content)) == 0 {
			add(f.Path, 0, "error", "main configuration is empty")
		}
		if !utf8.Valid(f.Content) || bytes.IndexByte(f.Content, 0) >= 0 {
			add(f.Path, 0, "error", "not UTF-8 text")
			continue
		}
		for i, line := range strings.Split(string(f.Content), "\n") {
			trimmed := strings.TrimSpace(line)
			if strings.Contains(trimmed, "{{") || strings.Contains(trimmed, "{%") {
				add(f.Path, i+1, "warning", "unrendered template syntax: %q", clip(trimmed))
			}
			if f.Kind == msg.FileMap && trimmed != "" && !strings.HasPrefix(trimmed, "#") && len(strings.Fields(trimmed)) < 2 {
				add(f.Path, i+1, "error", "map entry %q has a key but no value", clip(trimmed))
			}
		}
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// HAProxyChecker runs `haproxy -c` on the bundle laid out on disk.
type HAProxyChecker struct{ C *haproxycheck.Checker }

func (HAProxyChecker) Name() string { return HAProxy }

func (h HAProxyChecker) Check(ctx context.Context, b msg.Bundle) ([]msg.Problem, error) {
	files := make([]haproxycheck.File, len(b.Files))
	for i, f := range b.Files {
		files[i] = haproxycheck.File{Path: f.Path, Content: f.Content}
	}
	problems, err := h.C.Check(ctx, files, b.Main, b.Base)
	if err != nil && !errors.Is(err, haproxycheck.ErrInvalid) {
		return nil, err
	}
	out := make([]msg.Problem, 0, len(problems))
	for _, p := range problems {
		sev := "error"
		if p.Severity == haproxycheck.SeverityWarning {
			sev = "warning"
		}
		out = append(out, msg.Problem{File: p.File, Line: p.Line, Severity: sev, Message: p.Message})
	}
	if err != nil && !Failed(out) {
		// Rejected, yet nothing parsed as an alert: keep haproxy's verdict.
		out = append(out, msg.Problem{File: b.Main, Severity: "error", Message: err.Error()})
	}
	return out, nil
}

// Prove decides whether cand, which differs from base (a bundle this kind
// fully accepted), is valid from the runtime values that changed
// (fastpath.Prove); an error wrapping fastpath.ErrFullCheck says why only
// the whole check can decide.
func (HAProxyChecker) Prove(base, cand msg.Bundle) (fastpath.Result, error) {
	return fastpath.Prove(base, cand)
}

// ConfigChecker is a kind that can also judge a candidate configuration.
type ConfigChecker interface {
	CheckConfig(ctx context.Context, c msg.Config) ([]msg.Problem, error)
}

// CheckConfig parses a candidate weft.yaml (structure, field paths, names)
// and compiles every target's templates, so that a configuration that
// cannot render never goes live. Each problem names the configuration field
// or the template and line.
func (TemplateChecker) CheckConfig(_ context.Context, c msg.Config) ([]msg.Problem, error) {
	cfg, err := config.Parse([]byte(c.YAML), "/")
	if err != nil {
		return splitProblems("weft.yaml", err), nil
	}
	var out []msg.Problem
	for _, name := range cfg.TargetNames() {
		if _, err := target.Compile(name, cfg.Targets[name]); err != nil {
			for _, p := range splitProblems("targets."+name, err) {
				var te *engine.Error
				if errors.As(err, &te) && te.Line > 0 && len(splitProblems("", err)) == 1 {
					p.Line = te.Line
				}
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// splitProblems turns an error (possibly joined) into one problem per line.
func splitProblems(file string, err error) []msg.Problem {
	var out []msg.Problem
	for _, line := range strings.Split(err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, msg.Problem{File: file, Severity: "error", Message: line})
		}
	}
	return out
}
