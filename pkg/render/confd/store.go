package confd

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
)

var (
	// ErrNotExist is what get and getv (without a default) fail with for a
	// key that is not in the store. The message is confd's: "key does not
	// exist: /the/key".
	ErrNotExist = errors.New("key does not exist")
	// ErrNoMatch is confd's error for a pattern that matches nothing. confd
	// defines it but never returns it (gets and getvs give an empty list);
	// it is kept so code written against confd's store compiles the same.
	ErrNoMatch = errors.New("no keys match")
)

// KeyError is the error of a lookup of a missing key. It prints as confd's
// store prints it, "<err>: <key>", and unwraps to Err (ErrNotExist).
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return e.Err.Error() + ": " + e.Key }

// Unwrap returns Err.
func (e *KeyError) Unwrap() error { return e.Err }

// KVPair is one key and its value. Templates print it as {/key value}, as
// confd's does, and reach the fields as .Key and .Value.
type KVPair struct {
	Key   string
	Value string
}

// KVPairs sorts by key.
type KVPairs []KVPair

func (ks KVPairs) Len() int           { return len(ks) }
func (ks KVPairs) Less(i, j int) bool { return ks[i].Key < ks[j].Key }
func (ks KVPairs) Swap(i, j int)      { ks[i], ks[j] = ks[j], ks[i] }

// Store is confd's memkv store: the keys a template resource sees, named
// relative to its prefix ("/database/url"), with the lookups behind the
// template functions exists, get, gets, getv, getvs, ls and lsdir. It is
// safe for concurrent use.
type Store struct {
	mu sync.RWMutex
	m  map[string]KVPair
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{m: make(map[string]KVPair)} }

// Set sets key to value.
func (s *Store) Set(key, value string) {
	s.mu.Lock()
	s.m[key] = KVPair{Key: key, Value: value}
	s.mu.Unlock()
}

// Del removes key.
func (s *Store) Del(key string) {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// Purge removes every key.
func (s *Store) Purge() {
	s.mu.Lock()
	clear(s.m)
	s.mu.Unlock()
}

// Len is the number of keys.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}

// Exists reports whether key is in the store (template function exists).
// Only exact keys exist: a "directory" such as "/database" that has keys
// below it but is not itself a key does not.
func (s *Store) Exists(key string) bool {
	s.mu.RLock()
	_, ok := s.m[key]
	s.mu.RUnlock()
	return ok
}

// Get returns the pair of key (template function get), or a *KeyError
// wrapping ErrNotExist.
func (s *Store) Get(key string) (KVPair, error) {
	s.mu.RLock()
	kv, ok := s.m[key]
	s.mu.RUnlock()
	if !ok {
		return KVPair{}, &KeyError{Key: key, Err: ErrNotExist}
	}
	return kv, nil
}

// GetValue returns the value of key (template function getv). A missing
// key gives the first default when one is given (further ones are ignored,
// as in confd), and a *KeyError wrapping ErrNotExist otherwise. A key that
// exists with an empty value gives "", not the default.
func (s *Store) GetValue(key string, defaultValue ...string) (string, error) {
	s.mu.RLock()
	kv, ok := s.m[key]
	s.mu.RUnlock()
	if !ok {
		if len(defaultValue) > 0 {
			return defaultValue[0], nil
		}
		return "", &KeyError{Key: key, Err: ErrNotExist}
	}
	return kv.Value, nil
}

// GetAll returns the pairs whose key matches pattern with path.Match
// (template function gets), sorted by key. '*' does not cross '/', so
// "/upstream/*" matches "/upstream/a" but not "/upstream/a/b", and a
// pattern without wildcards matches its own key only. Nothing matching is
// an empty list, not an error. A malformed pattern ("/a/[") is an error
// wrapping path.ErrBadPattern, reported only when the store has at least
// one key, because the pattern is only ever checked against a key (confd
// does the same).
func (s *Store) GetAll(pattern string) (KVPairs, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(KVPairs, 0)
	for _, kv := range s.m {
		ok, err := path.Match(pattern, kv.Key)
		if err != nil {
			return nil, fmt.Errorf("invalid pattern %q: %w", pattern, err)
		}
		if ok {
			out = append(out, kv)
		}
	}
	sort.Sort(out)
	return out, nil
}

// GetAllValues returns the values of the keys matching pattern (template
// function getvs). The values are sorted as strings by themselves, not in
// the order of their keys: with /u/a = "10.0.0.9" and /u/b = "10.0.0.10",
// getvs "/u/*" gives [10.0.0.10 10.0.0.9]. Duplicate values are kept.
func (s *Store) GetAllValues(pattern string) ([]string, error) {
	pairs, err := s.GetAll(pattern)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(pairs))
	for i, kv := range pairs {
		out[i] = kv.Value
	}
	sort.Strings(out)
	return out, nil
}

// List returns the names of the entries directly under dir, keys and
// "directories" alike (template function ls), each once, sorted. It keeps
// confd's quirks, which follow from comparing the cleaned dir with the
// parent of each key:
//
//   - A key equal to dir adds its own base name: with keys /app and
//     /app/port, ls "/app" is [app port].
//   - ls "/" lists only the keys directly under the root (/a gives "a"), not
//     deeper ones (/b/c gives nothing), because "/" splits into two empty
//     terms that only a parent of "/" matches.
//   - Matching is by whole path segments: ls "/app" never lists /apple/x.
//   - A trailing slash is accepted: ls "/app/" is ls "/app".
func (s *Store) List(dir string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	prefix := pathToTerms(dir)
	seen := make(map[string]struct{})
	for _, kv := range s.m {
		if kv.Key == dir {
			seen[path.Base(kv.Key)] = struct{}{}
			continue
		}
		if hasPrefixTerms(prefix, pathToTerms(path.Dir(kv.Key))) {
			rest := stripKey(kv.Key, dir)
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				rest = rest[:i]
			}
			seen[rest] = struct{}{}
		}
	}
	return sortedSet(seen)
}

// ListDir returns the names of the "directories" directly under dir: the
// next segment of every key that has at least one more segment after it
// (template function lsdir), each once, sorted. As in confd, a key is only
// considered when it starts with dir as a plain string, and then compared
// by segments; so lsdir "/" is always empty (see List), and a leaf key
// directly under dir is not a directory.
func (s *Store) ListDir(dir string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	prefix := pathToTerms(dir)
	seen := make(map[string]struct{})
	for _, kv := range s.m {
		if !strings.HasPrefix(kv.Key, dir) {
			continue
		}
		items := pathToTerms(path.Dir(kv.Key))
		if hasPrefixTerms(prefix, items) && len(items) > len(prefix) {
			seen[items[len(prefix)]] = struct{}{}
		}
	}
	return sortedSet(seen)
}

func sortedSet(seen map[string]struct{}) []string {
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// stripKey removes prefix from key, then one leading slash.
func stripKey(key, prefix string) string {
	return strings.TrimPrefix(strings.TrimPrefix(key, prefix), "/")
}

// pathToTerms splits the cleaned path on '/': "/" is ["", ""], "/a/b" is
// ["", "a", "b"].
func pathToTerms(p string) []string {
	return strings.Split(path.Clean(p), "/")
}

func hasPrefixTerms(prefix, test []string) bool {
	if len(test) < len(prefix) {
		return false
	}
	for i, term := range prefix {
		if test[i] != term {
			return false
		}
	}
	return true
}
