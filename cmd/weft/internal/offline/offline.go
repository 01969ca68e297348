// Package offline renders a target without NATS: it reads a folder of
// manifests, indexes the watched types exactly as the running services do
// (same ignore fields, same index_by), renders the target and writes the
// bundle into a folder. Template authors and their CI use it through
// `weft render`.
package offline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/services/watcher/source/manifests"
)

// Options of one offline render.
type Options struct {
	Target    string // default: the only target
	Resources string // default: the first manifests source's folder
	Out       string // where the bundle is written; "" writes nothing
}

// Result of one offline render.
type Result struct {
	Target         string
	Objects        int
	Bundle         msg.Bundle
	ResourceErrors []msg.ResourceError
	ManifestErrors []string
}

// Render renders one target of cfg from a folder of manifests.
func Render(ctx context.Context, cfg *config.Config, o Options) (Result, error) {
	var res Result
	name, err := pickTarget(cfg, o.Target)
	if err != nil {
		return res, err
	}
	res.Target = name
	dir := o.Resources
	if dir == "" {
		for _, s := range cfg.Sources {
			if s.Type == config.SourceManifests {
				dir = s.Path
				break
			}
		}
	}
	if dir == "" {
		return res, errors.New("no resources folder: pass --resources")
	}
	snap, err := manifests.Scan(dir)
	if err != nil {
		return res, err
	}
	for _, pe := range snap.Errors {
		res.ManifestErrors = append(res.ManifestErrors, pe.Error())
	}
	ix, err := Index(cfg, snap.Objects)
	if err != nil {
		return res, err
	}
	for _, n := range ix.Counts() {
		res.Objects += n
	}
	t, err := target.Compile(name, cfg.Targets[name])
	if err != nil {
		return res, err
	}
	r, err := t.Render(ctx, ix.Stores(), nil)
	if err != nil {
		return res, err
	}
	res.Bundle, res.ResourceErrors = r.Bundle, r.Errors
	if o.Out == "" {
		return res, nil
	}
	return res, write(o.Out, r.Bundle)
}

// Index builds the render index of cfg's watched types from objects.
func Index(cfg *config.Config, objects []manifests.Object) (*index.Index, error) {
	var specs []index.Spec
	for _, typ := range cfg.ResourceTypes() {
		specs = append(specs, index.Spec{Type: typ, IndexBy: cfg.WatchedResources[typ].IndexBy})
	}
	ix, err := index.New(specs)
	if err != nil {
		return nil, err
	}
	strip := cfg.IgnorePaths()
	for i, o := range objects {
		typ, ok := cfg.TypeFor(o.APIVersion, o.Kind)
		if !ok {
			continue
		}
		for _, p := range strip {
			p.Delete(o.Body)
		}
		// The index keeps the object as JSON: one that does not encode
		// is an error here, not an object left out.
		put, err := ix.Prepare(index.Put{Type: typ, ID: msg.ResourceKey("offline", typ, o.Namespace, o.Name), Rev: uint64(i + 1), Object: o.Body})
		if err != nil {
			return nil, err
		}
		ix.Put(put)
	}
	return ix, nil
}

func pickTarget(cfg *config.Config, name string) (string, error) {
	if name != "" {
		if _, ok := cfg.Targets[name]; !ok {
			return "", fmt.Errorf("no target %q in the configuration (targets: %v)", name, cfg.TargetNames())
		}
		return name, nil
	}
	if names := cfg.TargetNames(); len(names) == 1 {
		return names[0], nil
	}
	return "", fmt.Errorf("the configuration has targets %v: pick one with --target", cfg.TargetNames())
}

func write(out string, b msg.Bundle) error {
	for _, f := range b.Files {
		p := filepath.Join(out, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		// Key material is never world-readable, here as where it is
		// deployed.
		mode := os.FileMode(0o644)
		if f.Secret() {
			mode = 0o600
		}
		if err := os.WriteFile(p, f.Content, mode); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil { // a file there before keeps its mode otherwise
			return err
		}
	}
	return nil
}
