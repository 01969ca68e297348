package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/weftio/weft/services/deployer/driver/internal/mapfile"
	"path"
	"slices"
	"strings"
)

// plan is what an Apply has to do.
type plan struct {
	main []byte
	// cfgChanged: the stored configuration differs from main (read by
	// client-native's parser: the API stores its own serialization of what
	// was posted, so the texts differ even when nothing changed).
	cfgChanged bool
	// creates are the files storage does not have; updates those it has
	// with another content (old holds the stored file).
	creates, updates []item
	old              map[string]storedFile
	unchanged        int
	// stale are the storage files that left the bundle.
	stale []staleFile
}

type staleFile struct {
	kind kind
	name string
}

func (d *Driver) plan(st *state, main []byte, items []item) *plan {
	p := &plan{main: main, old: map[string]storedFile{}}
	p.cfgChanged = !sameConfig(stripHeader(st.config), main)
	if !p.cfgChanged {
		p.unchanged++
	}
	inBundle := map[string]bool{}
	for _, it := range items {
		inBundle[it.Path] = true
		f, ok := st.stored[it.kind][it.name]
		switch {
		case !ok:
			p.creates = append(p.creates, it)
		case sameStored(it, f):
			p.unchanged++
		default:
			p.updates = append(p.updates, it)
			p.old[it.Path] = f
		}
	}
	for _, k := range []kind{kindMap, kindCert, kindGeneral} {
		for _, name := range sortedKeys(st.stored[k]) {
			if !inBundle[d.bundlePath(k, name)] {
				p.stale = append(p.stale, staleFile{kind: k, name: name})
			}
		}
	}
	return p
}

func (p *plan) empty() bool {
	return !p.cfgChanged && len(p.creates)+len(p.updates)+len(p.stale) == 0
}

// stripHeader drops the "# _md5hash=..." and "# _version=N" lines the API
// puts at the top of the configuration it stores.
func stripHeader(b []byte) []byte {
	for {
		first, rest, ok := bytes.Cut(b, []byte("\n"))
		t := bytes.TrimSpace(first)
		if !ok || !(bytes.HasPrefix(t, []byte("# _version")) || bytes.HasPrefix(t, []byte("# _md5hash"))) {
			return b
		}
		b = rest
	}
}

// sameConfig reports whether two configurations are the same once read by
// client-native's parser: the API stores what it is given reformatted (two
// spaces of indentation, the unnamed defaults section named
// "unnamed_defaults_1", ...). Whole-line comments are no difference.
func sameConfig(stored, main []byte) bool {
	if bytes.Equal(stored, main) {
		return true
	}
	a, err := parseConfig(stored)
	if err != nil {
		return false
	}
	b, err := parseConfig(main)
	return err == nil && a.String() == b.String()
}

// runtimeOp is one change through a runtime endpoint.
type runtimeOp struct {
	show string
	req  request
}

// decision is how a plan is delivered: a reload (reason set), or the
// runtime operations.
type decision struct {
	reason, detail string
	ops            []runtimeOp
}

// decide picks the runtime path when every change can take it.
func (d *Driver) decide(ctx context.Context, st *state, p *plan) (decision, error) {
	if st.failedReload != nil {
		return decision{reason: ReasonPending, detail: fmt.Sprintf("reload %s failed: %s", st.failedReload.ID, strings.TrimSpace(st.failedReload.Response))}, nil
	}
	var ops []runtimeOp
	if p.cfgChanged {
		changes, err := diffConfig(stripHeader(st.config), p.main)
		var se *structureError
		if errors.As(err, &se) {
			return decision{reason: ReasonStructure, detail: d.opts.Main + ": " + se.detail}, nil
		}
		if err != nil {
			return decision{}, err
		}
		for _, c := range changes {
			ops = append(ops, serverOp(c))
		}
	}
	fileOps, reason, detail, err := d.fileOps(ctx, p)
	if err != nil || reason != "" {
		return decision{reason: reason, detail: detail}, err
	}
	ops = append(ops, fileOps...)
	if len(ops) > 0 && d.opts.DisableRuntime {
		return decision{reason: ReasonRuntimeDisabled, detail: fmt.Sprintf("%d runtime changes", len(ops))}, nil
	}
	return decision{ops: ops}, nil
}

// fileOps are the runtime operations for the changed files, or the reason
// why one of them needs a reload.
func (d *Driver) fileOps(ctx context.Context, p *plan) (ops []runtimeOp, reason, detail string, err error) {
	var lm loadedFiles
	for _, it := range p.updates {
		if !referenced(p.main, it.name) {
			continue // HAProxy does not read it: storage is enough
		}
		if it.kind == kindGeneral {
			return nil, ReasonFileChanged, it.Path + " is read when HAProxy loads its configuration", nil
		}
		if lm == nil {
			if lm, err = d.loaded(ctx, p); err != nil {
				return nil, "", "", err
			}
		}
		ref, ok := lm[it.Path]
		if !ok {
			return nil, ReasonFileChanged, it.Path + " is not a " + it.kind.String() + " HAProxy has loaded", nil
		}
		if it.kind == kindCert {
			ops = append(ops, certOp(ref, it))
			continue
		}
		patch, why := mapfile.Diff(mapfile.Parse(p.old[it.Path].content), mapfile.Parse(it.Content), mapfile.OrderMatters(p.main, it.name))
		if why != "" {
			return nil, ReasonFileChanged, it.Path + ": " + why, nil
		}
		ops = append(ops, mapOps(ref, it.Path, patch)...)
	}
	return ops, "", "", nil
}

// referenced reports whether the configuration may read a storage file: its
// name appears in it.
func referenced(cfg []byte, name string) bool { return bytes.Contains(cfg, []byte(name)) }

// loadedFiles maps bundle paths to the name HAProxy's runtime knows the
// loaded map or certificate by.
type loadedFiles map[string]string

// loaded asks the runtime endpoints which maps and certificates HAProxy has
// loaded; it only asks for the kinds the plan changes.
func (d *Driver) loaded(ctx context.Context, p *plan) (loadedFiles, error) {
	lm := loadedFiles{}
	kinds := map[kind]bool{}
	for _, it := range p.updates {
		kinds[it.kind] = true
	}
	if kinds[kindMap] {
		var maps []storageModel
		if err := d.api.getJSON(ctx, "/services/haproxy/runtime/maps", &maps); err != nil {
			return nil, err
		}
		for _, m := range maps {
			// The runtime endpoints take a map by its file name.
			if m.File != "" {
				lm[d.bundlePath(kindMap, path.Base(m.File))] = path.Base(m.File)
			}
		}
	}
	if kinds[kindCert] {
		var certs []storageModel
		if err := d.api.getJSON(ctx, "/services/haproxy/runtime/ssl_certs", &certs); err != nil {
			return nil, err
		}
		for _, c := range certs {
			// The runtime endpoints take a certificate by the name HAProxy
			// loaded it with, usually its full path.
			if c.StorageName != "" {
				lm[d.bundlePath(kindCert, path.Base(c.StorageName))] = c.StorageName
			}
		}
	}
	return lm, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
