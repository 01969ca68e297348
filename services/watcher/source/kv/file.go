package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.yaml.in/yaml/v2"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/services/watcher/source"
)

// maxFileSize bounds what a file source reads.
const maxFileSize = 64 << 20

// fileQuiet is how long the folder must be quiet after a change before the
// file is read, so that an editor's save gives one read.
const fileQuiet = 50 * time.Millisecond

// fileSource reads one YAML or JSON file.
type fileSource struct {
	base
	path string
	dir  string
	json bool
}

func newFile(b base, src config.Source) (*fileSource, error) {
	if src.Path == "" {
		return nil, fmt.Errorf("%w: path is required", ErrConfig)
	}
	p, err := filepath.Abs(src.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: path %q: %v", ErrConfig, src.Path, err)
	}
	return &fileSource{base: b, path: p, dir: filepath.Dir(p), json: strings.EqualFold(filepath.Ext(p), ".json")}, nil
}

// read reads and flattens the file.
func (s *fileSource) read() (*listing, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, s.unavailable(err, "read %s", s.path)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, s.unavailable(err, "read %s", s.path)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: %w: %s is larger than %d bytes", s.typ, ErrInvalidData, s.path, maxFileSize)
	}
	doc, err := s.parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s: %v", s.typ, ErrInvalidData, s.path, err)
	}
	l := newListing(s.typ, 0)
	flatten(doc, "/", func(p, v string) {
		if name, ok := s.scope.name(p); ok {
			l.add(name, entry{value: v, key: p})
		}
	})
	return l, nil
}

func (s *fileSource) parse(data []byte) (any, error) {
	var doc any
	if s.json {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, errors.New("more than one JSON value")
		}
	} else if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	switch doc.(type) {
	case nil, map[any]any, map[string]any, []any:
		return doc, nil
	}
	return nil, fmt.Errorf("the top level is a %T, not a mapping or a list", doc)
}

// flatten walks a decoded document as confd's file backend does, calling
// emit with each scalar's path and text; mapping keys are walked in order.
func flatten(node any, key string, emit func(p, v string)) {
	switch n := node.(type) {
	case []any:
		for i, v := range n {
			flatten(v, path.Join(key, strconv.Itoa(i)), emit)
		}
	case map[any]any:
		keys := make([]string, 0, len(n))
		byName := make(map[string]any, len(n))
		for k, v := range n {
			ks, ok := k.(string)
			if !ok {
				ks = fmt.Sprint(k)
			}
			keys = append(keys, ks)
			byName[ks] = v
		}
		slices.Sort(keys)
		for _, k := range keys {
			flatten(byName[k], path.Join(key, k), emit)
		}
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			flatten(n[k], path.Join(key, k), emit)
		}
	case string:
		emit(key, n)
	case int:
		emit(key, strconv.Itoa(n))
	case int64:
		emit(key, strconv.FormatInt(n, 10))
	case uint64:
		emit(key, strconv.FormatUint(n, 10))
	case bool:
		emit(key, strconv.FormatBool(n))
	case float64:
		emit(key, strconv.FormatFloat(n, 'f', -1, 64))
	case json.Number:
		if i, err := n.Int64(); err == nil {
			emit(key, strconv.FormatInt(i, 10))
		} else if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
			emit(key, strconv.FormatUint(u, 10))
		} else if f, err := n.Float64(); err == nil {
			emit(key, strconv.FormatFloat(f, 'f', -1, 64))
		} else {
			emit(key, string(n))
		}
	}
}

// Run reads the file now, after every change in its folder (unless the
// source polls) and every Rescan, until ctx ends.
func (s *fileSource) Run(ctx context.Context, sink source.Sink) error {
	done, err := s.start()
	if err != nil {
		return err
	}
	defer done()
	rep := newReporter(sink, s.typ)

	fsw := s.watcher(ctx, sink)
	if fsw != nil {
		defer fsw.Close()
	}
	var (
		events   <-chan fsnotify.Event
		errs     <-chan error
		watching bool
	)
	if fsw != nil {
		events, errs = fsw.Events, fsw.Errors
	}
	tick := time.NewTicker(s.rescan)
	defer tick.Stop()
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	defer quiet.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	bo := backoff{cfg: s.bo}

	read := func() {
		var watchErr error
		if fsw != nil && !watching {
			if watchErr = fsw.Add(s.dir); watchErr == nil {
				watching = true
			}
		}
		l, err := s.read()
		if err == nil {
			err = rep.replace(ctx, l)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil && watchErr != nil {
			err = s.unavailable(watchErr, "watch %s", s.dir)
		}
		if err != nil {
			sink.Problem(ctx, err)
			retry.Reset(bo.next())
			return
		}
		bo.reset()
		retry.Stop()
	}

	read()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events, errs, fsw = nil, nil, nil
				sink.Problem(ctx, s.unavailable(errors.New("notifications stopped"), "watch %s; changes are read every %s", s.dir, s.rescan))
				continue
			}
			if ev.Name == s.dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				watching = false
			}
			if s.concerns(ev.Name) {
				quiet.Reset(fileQuiet)
			}
		case _, ok := <-errs:
			if ok {
				// Events were lost: read to be sure.
				quiet.Reset(fileQuiet)
			}
		case <-quiet.C:
			read()
		case <-retry.C:
			read()
		case <-tick.C:
			read()
		}
	}
}

// watcher returns a watcher of changes in the file's folder: nil when the
// source polls, or when none can be had (reported to sink).
func (s *fileSource) watcher(ctx context.Context, sink source.Sink) *fsnotify.Watcher {
	if s.poll {
		return nil
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		sink.Problem(ctx, s.unavailable(err, "watch %s; changes are read every %s", s.dir, s.rescan))
		return nil
	}
	return fsw
}

// concerns reports whether a change of name (in the watched folder) may
// change the file: the file itself, the folder, or a Kubernetes volume's
// "..data" links.
func (s *fileSource) concerns(name string) bool {
	return name == s.path || name == s.dir || strings.HasPrefix(filepath.Base(name), "..")
}
