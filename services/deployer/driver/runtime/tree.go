package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"syscall"
)

// tree reads Dir for one plan (an Apply's, or Drift's) and nothing else:
// each folder a bundle path names is opened once and each file is
// stat'ed once, so that planning a bundle of many files in a few folders
// costs about one system call per file. Through os.Root, a path of
// several parts is otherwise walked again, a folder opened and closed,
// for every look at it. What it returned is not looked at again: it is not
// used once the plan writes anything.
type tree struct {
	root  *os.Root
	dirs  map[string]treeDir
	stats map[string]treeStat
}

// treeDir is a folder of the tree: r is nil when the folder is missing,
// and err says why it could not be opened otherwise.
type treeDir struct {
	r   *os.Root
	err error
}

// treeStat is the Lstat of a bundle path: fi is nil when nothing is there.
type treeStat struct {
	fi  fs.FileInfo
	err error
}

func newTree(root *os.Root) *tree {
	return &tree{root: root, dirs: map[string]treeDir{}, stats: map[string]treeStat{}}
}

// close closes the folders the tree opened.
func (t *tree) close() {
	for _, d := range t.dirs {
		if d.r != nil {
			_ = d.r.Close()
		}
	}
	clear(t.dirs)
}

// dir returns the folder dir of Dir, opened once; nil without an error when
// it (or a folder above it) is missing. A part of it that is not a folder
// is an ErrConflict naming the bundle path name.
func (t *tree) dir(dir, name string) (*os.Root, error) {
	if dir == "." {
		return t.root, nil
	}
	if d, ok := t.dirs[dir]; ok {
		return d.r, d.err
	}
	r, err := t.root.OpenRoot(dir)
	if err != nil {
		r = nil
		if !errors.Is(err, fs.ErrNotExist) {
			err = t.why(dir, name, err)
		} else {
			err = nil
		}
	}
	t.dirs[dir] = treeDir{r: r, err: err}
	return r, err
}

// why turns the failure to open folder dir into the error readDisk gives:
// a part of dir that is not a folder is an ErrConflict.
func (t *tree) why(dir, name string, openErr error) error {
	for _, a := range ancestors(name) {
		fi, err := t.root.Stat(a)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("runtime: stat %s: %w", a, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s needs %s to be a directory", ErrConflict, name, a)
		}
	}
	return fmt.Errorf("runtime: open %s: %w", dir, openErr)
}

// lstat returns what is at bundle path name, not following a link there:
// nil without an error when nothing is.
func (t *tree) lstat(name string) (fs.FileInfo, error) {
	if s, ok := t.stats[name]; ok {
		return s.fi, s.err
	}
	fi, err := t.lstatOnce(name)
	t.stats[name] = treeStat{fi: fi, err: err}
	return fi, err
}

func (t *tree) lstatOnce(name string) (fs.FileInfo, error) {
	r, err := t.dir(path.Dir(name), name)
	if err != nil || r == nil {
		return nil, err
	}
	fi, err := r.Lstat(path.Base(name))
	switch {
	case err == nil:
		return fi, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return nil, nil
	default:
		return nil, fmt.Errorf("runtime: stat %s: %w", name, err)
	}
}

// readFile reads the regular file at bundle path name.
func (t *tree) readFile(name string) ([]byte, error) {
	r, err := t.dir(path.Dir(name), name)
	if err == nil && r == nil {
		err = fs.ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: read %s: %w", name, err)
	}
	b, err := r.ReadFile(path.Base(name))
	if err != nil {
		return nil, fmt.Errorf("runtime: read %s: %w", name, err)
	}
	return b, nil
}
