package msg

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"strings"
)

// File kinds in a bundle.
const (
	FileConfig = "config" // the main configuration (haproxy.cfg)
	FileMap    = "map"
	FileFile   = "file" // any auxiliary file (error pages, ...)
	FileCert   = "cert"
)

// BundleFile is one rendered file, at a path relative to the bundle root.
type BundleFile struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Content []byte `json:"content"`
}

// FileRef describes a bundle file without its content (render messages).
type FileRef struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	Size int    `json:"size"`
	Hash string `json:"hash"`
}

// Bundle is an immutable rendered output, stored in ObjectBundles under its
// Hash. Base is the absolute folder the files are deployed under; templates
// refer to auxiliary files by their path below Base, so a validator that lays
// the bundle out elsewhere rewrites Base in Main.
type Bundle struct {
	Target string       `json:"target"`
	Base   string       `json:"base"`
	Main   string       `json:"main"`
	Hash   string       `json:"hash"`
	Files  []BundleFile `json:"files"`
}

func (Bundle) Schema() string { return SchemaBundle }

// Validate checks the bundle's consistency.
func (b Bundle) Validate() error { return b.Consistent() }

// NewBundle builds a bundle with its files in path order and its hash set.
func NewBundle(target, base, main string, files []BundleFile) (Bundle, error) {
	fs := slices.Clone(files)
	slices.SortFunc(fs, func(a, b BundleFile) int { return strings.Compare(a.Path, b.Path) })
	b := Bundle{Target: target, Base: base, Main: main, Files: fs}
	b.Hash = b.ComputeHash()
	return b, b.structure() // the hash was just computed from the content
}

// ComputeHash hashes the paths and contents (not the target or base: the
// same files are the same bundle).
func (b Bundle) ComputeHash() string {
	h := sha256.New()
	var n [8]byte
	for _, f := range b.Files {
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Path)))
		h.Write(n[:])
		h.Write([]byte(f.Path))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Content)))
		h.Write(n[:])
		h.Write(f.Content)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Consistent reports whether the bundle is whole: a target, a Main file that
// is present, safe unique sorted paths, known kinds, and a Hash that matches
// the content.
func (b Bundle) Consistent() error {
	if err := b.structure(); err != nil {
		return err
	}
	if got := b.ComputeHash(); got != b.Hash {
		return fmt.Errorf("%w: hash %q does not match content (%q)", ErrInvalid, b.Hash, got)
	}
	return nil
}

// structure checks everything Consistent does but the hash.
func (b Bundle) structure() error {
	if err := need("target", b.Target, "main", b.Main); err != nil {
		return err
	}
	if b.Base != "" && !path.IsAbs(b.Base) {
		return fmt.Errorf("%w: base %q is not absolute", ErrInvalid, b.Base)
	}
	seenMain := false
	for i, f := range b.Files {
		if err := SafePath(f.Path); err != nil {
			return err
		}
		if i > 0 && b.Files[i-1].Path >= f.Path {
			return fmt.Errorf("%w: files not sorted or %q duplicated", ErrInvalid, f.Path)
		}
		switch f.Kind {
		case FileConfig, FileMap, FileFile, FileCert:
		default:
			return fmt.Errorf("%w: file %q has unknown kind %q", ErrInvalid, f.Path, f.Kind)
		}
		seenMain = seenMain || f.Path == b.Main
	}
	if !seenMain {
		return fmt.Errorf("%w: main file %q is not in the bundle", ErrInvalid, b.Main)
	}
	return nil
}

// Refs lists the files without content.
func (b Bundle) Refs() []FileRef {
	out := make([]FileRef, len(b.Files))
	for i, f := range b.Files {
		sum := sha256.Sum256(f.Content)
		out[i] = FileRef{Path: f.Path, Kind: f.Kind, Size: len(f.Content), Hash: hex.EncodeToString(sum[:8])}
	}
	return out
}

// SafePath checks that p is relative, clean and stays below the bundle root.
func SafePath(p string) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") || strings.ContainsRune(p, '\\') {
		return fmt.Errorf("%w: unsafe file path %q", ErrInvalid, p)
	}
	return nil
}
