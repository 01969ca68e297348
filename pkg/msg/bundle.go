package msg

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path"
	"path/filepath"
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
	// cut is how Content was cut into chunks and hashed, when known (a
	// Cutter's, a loaded bundle's): it stands for the content it was made
	// for only (the same bytes in memory), and is made anew otherwise.
	cut *cutFile
}

// chunking returns how f's content is cut into chunks and their hashes.
func (f BundleFile) chunking() cutFile { return f.cutOr(cutFile{}) }

// cutOr returns f's cut when it is known, else f's content cut again
// from prev, the same file as cut before (cutAgain).
func (f BundleFile) cutOr(prev cutFile) cutFile {
	if c := f.cut; c != nil && len(c.content) == len(f.Content) && (len(f.Content) == 0 || &c.content[0] == &f.Content[0]) {
		return *c
	}
	return cutAgain(prev, f.Content)
}

// digest is the file's content digest: the SHA-256 over the SHA-256 (hex)
// of each of its chunks (ChunkEnds), in order.
func (c cutFile) digest() [sha256.Size]byte {
	h := sha256.New()
	for _, r := range c.refs {
		h.Write([]byte(r))
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// privateKeyPEM ends the first line of every PEM private key ("-----BEGIN
// PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----", ...).
var privateKeyPEM = []byte("PRIVATE KEY-----")

// Secret reports whether the file is key material that must never be
// world-readable where it is deployed: a certificate (Kind FileCert), or any
// file that holds a PEM private key.
func (f BundleFile) Secret() bool {
	return f.Kind == FileCert || bytes.Contains(f.Content, privateKeyPEM)
}

// FileRef describes a bundle file without its content (render messages).
// Hash is the first 16 hex digits of the file's content digest: the
// SHA-256 over the SHA-256 of each of its chunks (ChunkEnds).
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
// same files are the same bundle): the SHA-256 over each file's path, size
// and content digest (the SHA-256 over its chunks' hashes), so a bundle
// whose chunks are known (a Cutter's, a loaded one's) is hashed without
// reading its content again.
func (b Bundle) ComputeHash() string {
	h := sha256.New()
	var n [8]byte
	for _, f := range b.Files {
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Path)))
		h.Write(n[:])
		h.Write([]byte(f.Path))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Content)))
		h.Write(n[:])
		d := f.chunking().digest()
		h.Write(d[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// wholeContentHash is how an older weft hashed a bundle: over each file's
// path, size and whole content. A bundle it stored still loads.
func (b Bundle) wholeContentHash() string {
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
// the content (ComputeHash; or, for a bundle an older weft made, its hash
// of the whole content).
func (b Bundle) Consistent() error {
	if err := b.structure(); err != nil {
		return err
	}
	got := b.ComputeHash()
	if got == b.Hash {
		return nil
	}
	if slices.ContainsFunc(b.Files, func(f BundleFile) bool { return f.cut != nil }) {
		// Chunks as a store listed them, cut otherwise than ChunkEnds
		// cuts: the content cut anew decides.
		fresh := b
		fresh.Files = slices.Clone(b.Files)
		for i := range fresh.Files {
			fresh.Files[i].cut = nil
		}
		if got = fresh.ComputeHash(); got == b.Hash {
			return nil
		}
	}
	if b.wholeContentHash() == b.Hash {
		return nil
	}
	return fmt.Errorf("%w: hash %q does not match content (%q)", ErrInvalid, b.Hash, got)
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
		d := f.chunking().digest()
		out[i] = FileRef{Path: f.Path, Kind: f.Kind, Size: len(f.Content), Hash: hex.EncodeToString(d[:8])}
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

// Relocate returns the bundle as a program that sees its files in dir
// (absolute) rather than in Base: Base in the main configuration is
// rewritten to dir (RewriteBase), and the hash is computed anew. A bundle
// already based at dir, or without a base, is returned as it is.
func (b Bundle) Relocate(dir string) (Bundle, error) {
	if b.Base == "" || b.Base == dir {
		return b, nil
	}
	if !filepath.IsAbs(dir) {
		return Bundle{}, fmt.Errorf("%w: relocate to %q: not an absolute path", ErrInvalid, dir)
	}
	files := slices.Clone(b.Files)
	for i, f := range files {
		if f.Path == b.Main {
			files[i].Content = RewriteBase(f.Content, strings.TrimSuffix(b.Base, "/"), strings.TrimSuffix(dir, "/"))
		}
	}
	return NewBundle(b.Target, dir, b.Main, files)
}

// isDelimiter reports whether b can end or start a path token in a config line.
func isDelimiter(b byte) bool {
	switch b {
	case ' ', '\t', '\r', '\n', '\v', '\f', '\'', '"', '`', '(', ')', '[', ']', '{', '}', '<', '>', ',', ';', '=', ':', '|':
		return true
	}
	return false
}

// RewriteBase replaces each occurrence of base that is a whole path or the
// start of one (followed by "/", a delimiter or the end, and not preceded by a
// path character) with repl.
func RewriteBase(cfg []byte, base, repl string) []byte {
	bb := []byte(base)
	var out []byte
	last, i := 0, 0
	for {
		j := bytes.Index(cfg[i:], bb)
		if j < 0 {
			break
		}
		start := i + j
		end := start + len(bb)
		before := start == 0 || isDelimiter(cfg[start-1])
		after := end == len(cfg) || cfg[end] == '/' || isDelimiter(cfg[end])
		if before && after {
			out = append(out, cfg[last:start]...)
			out = append(out, repl...)
			last = end
		}
		i = start + 1
	}
	if out == nil {
		return cfg
	}
	return append(out, cfg[last:]...)
}
