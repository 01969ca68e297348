package files

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

const manifestVersion = 1

// manifest records what the driver owns in Dest.
type manifest struct {
	Version int `json:"version"`
	// Files are the files the driver delivered: every path of the bundles it
	// applied, until it removes them.
	Files []string `json:"files"`
	// Dirs are the directories the driver created.
	Dirs []string `json:"dirs,omitempty"`
	// ReloadPending is set while files changed by the driver have not yet
	// been followed by a successful reload.
	ReloadPending bool `json:"reloadPending,omitempty"`
}

// readManifest loads the driver's manifest in Dest and returns it with its
// encoding; a missing manifest is an empty one.
func readManifest(root *os.Root, n names) (manifest, []byte, error) {
	raw, err := root.ReadFile(n.manifest)
	if errors.Is(err, fs.ErrNotExist) {
		return manifest{Version: manifestVersion}, nil, nil
	}
	if err != nil {
		return manifest{}, nil, fmt.Errorf("files: read manifest: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return manifest{}, nil, fmt.Errorf("files: read manifest %s: %w (remove it to let the driver start over; it will then own only the files of the next bundle)", n.manifest, err)
	}
	if m.Version != manifestVersion {
		return manifest{}, nil, fmt.Errorf("files: read manifest %s: unsupported version %d", n.manifest, m.Version)
	}
	for _, p := range slices.Concat(m.Files, m.Dirs) {
		if err := checkPath(p); err != nil {
			return manifest{}, nil, fmt.Errorf("files: read manifest %s: %w", n.manifest, err)
		}
	}
	return m, raw, nil
}

func (m manifest) encode() ([]byte, error) {
	m.Version = manifestVersion
	m.Files = sortedCopy(m.Files)
	m.Dirs = sortedCopy(m.Dirs)
	if m.Files == nil {
		m.Files = []string{}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("files: encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}

func sortedCopy(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// writeManifest replaces the manifest atomically unless its encoding equals
// old.
func writeManifest(root *os.Root, n names, m manifest, old []byte) error {
	b, err := m.encode()
	if err != nil {
		return err
	}
	if old != nil && bytes.Equal(b, old) {
		return nil
	}
	if err := writeAtomic(root, n, n.manifest, b, 0o644); err != nil {
		return fmt.Errorf("files: write manifest: %w", err)
	}
	return nil
}

// writeAtomic writes data to a temporary file in the root's top directory,
// fsyncs it and renames it to name.
func writeAtomic(root *os.Root, n names, name string, data []byte, mode fs.FileMode) (err error) {
	tmp := n.stage + "tmp-" + rand.Text()
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = root.Remove(tmp) // the write already failed; the leftover is cleaned up by the next staging
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		return err
	}
	syncDir(root, ".")
	return nil
}

// syncDir flushes a directory's entries to disk. It is best effort: some
// filesystems do not support syncing a directory, and the renames it makes
// durable have already succeeded.
func syncDir(root *os.Root, dir string) {
	d, err := root.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
