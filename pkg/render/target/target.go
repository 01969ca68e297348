// Package target turns one configured target into a bundle: it compiles the
// target's templates once (Compile), and renders them against the current
// resources into files laid out as they will be deployed (Render):
// haproxy.cfg at the root, maps/<name>, files/<name> and certs/<name>.
// get_path() in templates returns a file's absolute deployed path below the
// target's base. The target's fragments are rendered once per object and
// cached in the compiled target (see engine.Set): report every change of
// the resources and values with Invalidate. A Target is safe for
// concurrent use; renders of a target with fragments run one at a time.
//
// A target made from a confd resource (config.Target.ConfdResource) renders
// with the confd engine instead: the values, named by their full key paths,
// into one file named after the resource's dest, and Selects says which
// values it depends on.
package target

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/confd"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/library"
)

// MainFile is the path of the main configuration in a bundle.
const MainFile = "haproxy.cfg"

// ErrUnknownFile is returned by get_path for a name the target does not render.
var ErrUnknownFile = errors.New("no such file in the target")

var dirs = map[engine.Kind]string{engine.KindMap: "maps", engine.KindFile: "files", engine.KindCert: "certs"}

var fileKinds = map[engine.Kind]string{
	engine.KindConfig: msg.FileConfig, engine.KindMap: msg.FileMap, engine.KindFile: msg.FileFile, engine.KindCert: msg.FileCert,
}

// Target is a compiled target.
type Target struct {
	Name   string
	Config config.Target
	set    *engine.Set
	paths  map[engine.Kind]map[string]string // kind -> name -> bundle path
	// confd is the template resource of a target made from a confd
	// confdir; set and paths are then unused.
	confd *confd.Resource
	// cutter cuts each render's files against the last render's, so the
	// bundle's hash, refs and store read only what changed.
	cutter msg.Cutter
}

// Compile compiles every template of t. A template error is an
// *engine.Error naming the template and line. A target that names a
// library (t.Library) first gets its template sections from it (see
// library.Apply); an unknown library or a bad library option is an error.
func Compile(name string, t config.Target) (*Target, error) {
	if t.ConfdResource != nil {
		r, err := confd.Compile(*t.ConfdResource)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
		return &Target{Name: name, Config: t, confd: &r}, nil
	}
	if t.Library != "" {
		if err := library.Apply(&t); err != nil {
			return nil, fmt.Errorf("target %s: %w", name, err)
		}
	}
	spec := engine.Spec{Snippets: map[string]string{}, Fragments: map[string]engine.Fragment{}}
	for n, f := range t.Fragments {
		spec.Fragments[n] = engine.Fragment{ForEach: f.ForEach, Text: f.Template}
	}
	for key, s := range t.TemplateSnippets {
		n := key
		if s.Name != "" {
			n = s.Name
		}
		spec.Snippets[n] = s.Template
	}
	tg := &Target{Name: name, Config: t, paths: map[engine.Kind]map[string]string{}}
	add := func(kind engine.Kind, group map[string]config.Template) {
		names := make([]string, 0, len(group))
		for n := range group {
			names = append(names, n)
		}
		slices.Sort(names)
		tg.paths[kind] = map[string]string{}
		for _, n := range names {
			spec.Outputs = append(spec.Outputs, engine.Template{Kind: kind, Name: n, Text: group[n].Template})
			tg.paths[kind][n] = path.Join(dirs[kind], n)
		}
	}
	add(engine.KindMap, t.Maps)
	add(engine.KindFile, t.Files)
	add(engine.KindCert, t.Certificates)
	spec.Outputs = append(spec.Outputs, engine.Template{Kind: engine.KindConfig, Name: MainFile, Text: t.HAProxyConfig.Template})
	tg.paths[engine.KindConfig] = map[string]string{MainFile: MainFile}
	set, err := engine.Compile(spec)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", name, err)
	}
	tg.set = set
	return tg, nil
}

// Result is one render.
type Result struct {
	Bundle msg.Bundle
	Errors []msg.ResourceError
	Took   time.Duration
	// ValuesRead names the values the render read; AllValues is set when it
	// listed them all.
	ValuesRead []string
	AllValues  bool
	// FragmentsRendered counts the fragment entries rendered, and
	// FragmentsReused those taken from the cache.
	FragmentsRendered int
	FragmentsReused   int
	// OutputsRendered counts the outputs that ran, and OutputsReused those
	// taken from the cache.
	OutputsRendered int
	OutputsReused   int
}

// Render renders the target against resources (type name -> store) and
// values. A template failure is an *engine.Error.
func (t *Target) Render(ctx context.Context, resources, values map[string]any) (Result, error) {
	return t.RenderFetching(ctx, resources, values, nil)
}

// Fetcher returns the full body of an object kept on demand.
type Fetcher func(ctx context.Context, typ, namespace, name string) (map[string]any, error)

// RenderFetching is Render with fetch(type, namespace, name) answered by fetch.
func (t *Target) RenderFetching(ctx context.Context, resources, values map[string]any, fetch Fetcher) (Result, error) {
	if t.confd != nil {
		return t.renderConfd(ctx, values)
	}
	start := time.Now()
	out, err := t.set.Render(ctx, engine.Input{Resources: resources, Values: values, Path: t.path, Fetch: fetch})
	if err != nil {
		return Result{}, fmt.Errorf("target %s: %w", t.Name, err)
	}
	files := make([]msg.BundleFile, 0, len(out.Files))
	for _, f := range out.Files {
		files = append(files, msg.BundleFile{Path: t.paths[f.Kind][f.Name], Kind: fileKinds[f.Kind], Name: f.Name, Content: f.Content})
	}
	b, err := msg.NewBundle(t.Name, t.Config.Base, MainFile, t.cutter.Cut(files))
	if err != nil {
		return Result{}, fmt.Errorf("target %s: %w", t.Name, err)
	}
	res := Result{Bundle: b, Took: time.Since(start), ValuesRead: out.ValuesRead, AllValues: out.AllValues,
		FragmentsRendered: len(out.FragmentsRendered), FragmentsReused: out.FragmentsReused,
		OutputsRendered: len(out.OutputsRendered), OutputsReused: out.OutputsReused}
	for _, e := range out.Errors {
		res.Errors = append(res.Errors, msg.ResourceError{Type: e.Type, ID: e.ID, Message: e.Message})
	}
	return res, nil
}

// renderConfd renders a confd resource over the values, named by their
// full key paths, into a bundle of one file: the base name of its dest,
// under the folder of its dest (the target's base).
func (t *Target) renderConfd(ctx context.Context, values map[string]any) (Result, error) {
	start := time.Now()
	flat := confd.StringValues(values)
	content, err := t.confd.RenderContext(ctx, flat)
	if err != nil {
		return Result{}, fmt.Errorf("target %s: %w", t.Name, err)
	}
	main := t.Config.MainFile()
	b, err := msg.NewBundle(t.Name, t.Config.Base, main, t.cutter.Cut([]msg.BundleFile{{Path: main, Kind: msg.FileConfig, Name: main, Content: content}}))
	if err != nil {
		return Result{}, fmt.Errorf("target %s: %w", t.Name, err)
	}
	res := Result{Bundle: b, Took: time.Since(start)}
	for name := range flat {
		if t.confd.Selects(name) {
			res.ValuesRead = append(res.ValuesRead, name)
		}
	}
	slices.Sort(res.ValuesRead)
	return res, nil
}

// Selects returns, for a target whose dependence on values is known
// before it renders (a confd resource: the values its keys select), the
// test of a value name; nil for the others, whose renders record what
// they read.
func (t *Target) Selects() func(name string) bool {
	if t.confd != nil {
		return t.confd.Selects
	}
	return nil
}

// Invalidate marks the cached fragment entries that changes affect and
// reports whether the changes can alter the target's next render (see
// engine.Set.Invalidate); a confd target cannot tell, and says they can.
func (t *Target) Invalidate(changes []engine.Change) bool {
	if t.set != nil {
		return t.set.Invalidate(changes)
	}
	return true
}

// path implements get_path: the absolute deployed path of a rendered file.
func (t *Target) path(kind engine.Kind, name string) (string, error) {
	p, ok := t.paths[kind][name]
	if !ok {
		return "", fmt.Errorf("%w: %s %q", ErrUnknownFile, kind, name)
	}
	return path.Join(t.Config.Base, p), nil
}

// Failure describes a render or compile error for a render message.
func Failure(err error) *msg.TemplateError {
	var te *engine.Error
	if errors.As(err, &te) {
		return &msg.TemplateError{Template: te.Template, Line: te.Line, Message: err.Error()}
	}
	var ce *confd.TemplateError
	if errors.As(err, &ce) {
		return &msg.TemplateError{Template: ce.File, Line: ce.Line, Message: err.Error()}
	}
	return &msg.TemplateError{Message: err.Error()}
}
