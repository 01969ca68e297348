package dataplane

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/haproxytech/client-native/v6/misc"

	"github.com/weftio/weft/services/deployer/driver/internal/bundlepath"
)

// kind is the storage a bundle file goes to.
type kind int

const (
	kindMain kind = iota
	kindMap
	kindCert
	kindGeneral
)

func (k kind) String() string {
	return [...]string{"configuration", "map", "certificate", "general file"}[k]
}

// item is a bundle file with its storage.
type item struct {
	File
	kind kind
	// name is the storage name: the file's base name.
	name string
}

func pathReason(p string) string { return bundlepath.Reason(p) }

// classify validates the bundle's paths and sorts its files by storage.
func (d *Driver) classify(files []File) (main []byte, items []item, err error) {
	paths := make([]string, len(files))
	found := false
	for i, f := range files {
		if reason := pathReason(f.Path); reason != "" {
			return nil, nil, fmt.Errorf("%w: %q: %s", ErrBadPath, f.Path, reason)
		}
		paths[i] = f.Path
		if f.Path == d.opts.Main {
			main, found = f.Content, true
			continue
		}
		k, ok := d.kindOf(f.Path)
		if !ok {
			return nil, nil, fmt.Errorf("%w: %q: not %s, nor a file directly in %s/, %s/ or %s/ (the API's storage is flat)",
				ErrBadPath, f.Path, d.opts.Main, d.opts.MapsDir, d.opts.CertsDir, d.opts.GeneralDir)
		}
		name := path.Base(f.Path)
		if why := storageNameReason(k, name); why != "" {
			return nil, nil, fmt.Errorf("%w: %q: %s", ErrBadPath, f.Path, why)
		}
		items = append(items, item{File: f, kind: k, name: name})
	}
	if p, why := bundlepath.Conflict(paths); p != "" {
		return nil, nil, fmt.Errorf("%w: %q: %s", ErrBadPath, p, why)
	}
	if !found {
		return nil, nil, fmt.Errorf("%w: the bundle has no %s", ErrConfig, d.opts.Main)
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.Path, b.Path) })
	return main, items, nil
}

// storageNameReason tells why the API would store a file under another
// name than the bundle's, which the configuration could then not find: the
// storages keep only letters, digits, "_" and "-" around the one extension
// (client-native's SanitizeFilename makes "a.b.map" "a_b.map"), and the map
// storage adds ".map" to a name without it.
func storageNameReason(k kind, name string) string {
	if s := misc.SanitizeFilename(name); s != name {
		return fmt.Sprintf("the API would store it as %q (a storage name is letters, digits, _ and - with one extension)", s)
	}
	if k == kindMap && path.Ext(name) != ".map" {
		return fmt.Sprintf("the API would store it as %q (map storage names end in .map)", name+".map")
	}
	return ""
}

func (d *Driver) kindOf(p string) (kind, bool) {
	switch path.Dir(p) {
	case d.opts.MapsDir:
		return kindMap, true
	case d.opts.CertsDir:
		return kindCert, true
	case d.opts.GeneralDir:
		return kindGeneral, true
	}
	return 0, false
}

// bundlePath is the bundle path of a storage file.
func (d *Driver) bundlePath(k kind, name string) string {
	switch k {
	case kindMap:
		return d.opts.MapsDir + "/" + name
	case kindCert:
		return d.opts.CertsDir + "/" + name
	case kindGeneral:
		return d.opts.GeneralDir + "/" + name
	}
	return d.opts.Main
}
