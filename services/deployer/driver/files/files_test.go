//go:build linux

package files

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestApplySequence(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	d := r.driver(t, Options{ReloadCmd: r.reloadCmd()})
	r.write(t, "foreign.txt", "not weft's")

	v1 := bundle("haproxy.cfg", "global v1\n", "maps/hosts.map", "a.example 1\n", "certs/a.pem", "cert a\n")
	steps := []struct {
		name      string
		files     []File
		written   []string
		removed   []string
		unchanged int
		reloads   int // in total so far
		absent    []string
	}{
		{name: "first apply writes all and reloads once", files: v1,
			written: []string{"certs/a.pem", "haproxy.cfg", "maps/hosts.map"}, reloads: 1},
		{name: "identical apply writes nothing and does not reload", files: v1,
			unchanged: 3, reloads: 1},
		{name: "one changed file is the only one written",
			files:   bundle("haproxy.cfg", "global v1\n", "maps/hosts.map", "a.example 2\n", "certs/a.pem", "cert a\n"),
			written: []string{"maps/hosts.map"}, unchanged: 2, reloads: 2},
		{name: "a file dropped from the bundle is removed with its directory",
			files:   bundle("haproxy.cfg", "global v1\n", "maps/hosts.map", "a.example 2\n"),
			removed: []string{"certs/a.pem"}, unchanged: 2, reloads: 3, absent: []string{"certs/a.pem", "certs"}},
		{name: "a file in a new nested directory",
			files:   bundle("haproxy.cfg", "global v1\n", "maps/hosts.map", "a.example 2\n", "errors/http/503.http", "busy\n"),
			written: []string{"errors/http/503.http"}, unchanged: 2, reloads: 4},
		{name: "the bundle order does not matter",
			files:     bundle("errors/http/503.http", "busy\n", "maps/hosts.map", "a.example 2\n", "haproxy.cfg", "global v1\n"),
			unchanged: 3, reloads: 4},
	}
	for _, st := range steps {
		res := r.apply(t, d, st.files)
		if !slices.Equal(res.Written, st.written) {
			t.Errorf("%s: Written = %q, want %q", st.name, res.Written, st.written)
		}
		if !slices.Equal(res.Removed, st.removed) {
			t.Errorf("%s: Removed = %q, want %q", st.name, res.Removed, st.removed)
		}
		if res.Unchanged != st.unchanged {
			t.Errorf("%s: Unchanged = %d, want %d", st.name, res.Unchanged, st.unchanged)
		}
		changed := len(st.written)+len(st.removed) > 0
		if res.Reloaded != changed {
			t.Errorf("%s: Reloaded = %v, want %v", st.name, res.Reloaded, changed)
		}
		if got := r.reloads(t); got != st.reloads {
			t.Errorf("%s: %d reloads in total, want %d", st.name, got, st.reloads)
		}
		r.assertBundle(t, st.files)
		for _, p := range st.absent {
			if r.exists(p) {
				t.Errorf("%s: %s is still in Dest", st.name, p)
			}
		}
		if got := r.read(t, "foreign.txt"); got != "not weft's" {
			t.Errorf("%s: foreign file = %q", st.name, got)
		}
		var paths []string
		for _, f := range st.files {
			paths = append(paths, f.Path)
		}
		slices.Sort(paths)
		if m := readManifestFile(t, r); !slices.Equal(m.Files, paths) || m.ReloadPending {
			t.Errorf("%s: manifest = %+v, want files %q and no pending reload", st.name, m, paths)
		}
	}
}

func TestEmptyBundleRemovesOnlyOwnedFiles(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	d := r.driver(t, Options{ReloadCmd: r.reloadCmd()})
	r.write(t, "keep/foreign.conf", "foreign")
	r.apply(t, d, bundle("a.conf", "a", "keep/b.conf", "b", "sub/c.conf", "c"))

	res := r.apply(t, d, nil)
	if want := []string{"a.conf", "keep/b.conf", "sub/c.conf"}; !slices.Equal(res.Removed, want) {
		t.Errorf("Removed = %q, want %q", res.Removed, want)
	}
	if !res.Reloaded || r.reloads(t) != 2 {
		t.Errorf("Reloaded = %v with %d reloads, want a second reload", res.Reloaded, r.reloads(t))
	}
	if r.read(t, "keep/foreign.conf") != "foreign" {
		t.Error("foreign file changed")
	}
	if r.exists("sub") {
		t.Error("the directory the driver created is still there")
	}
}

func TestAdoptsIdenticalFiles(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.write(t, "a.conf", "same")
	d := r.driver(t, Options{ReloadCmd: r.reloadCmd(), CheckCmd: "false"})

	res := r.apply(t, d, bundle("a.conf", "same"))
	if len(res.Written) != 0 || res.Unchanged != 1 || res.Reloaded || r.reloads(t) != 0 {
		t.Errorf("Result = %+v with %d reloads, want nothing done", res, r.reloads(t))
	}
	if m := readManifestFile(t, r); !slices.Equal(m.Files, []string{"a.conf"}) {
		t.Errorf("manifest files = %q, want the adopted file", m.Files)
	}
}

func TestCheckFailureLeavesDestUntouched(t *testing.T) {
	t.Parallel()
	good := bundle("app.conf", "good\n", "maps/a.map", "a 1\n", "old.conf", "old\n")
	bad := bundle("app.conf", "bad\n", "maps/a.map", "a 2\n", "new/extra.conf", "new\n")
	tests := []struct {
		name     string
		check    string
		timeout  time.Duration
		wantOut  string
		wantErrs []error
	}{
		{name: "check rejects the content",
			check:   `grep -q good {{.src}} || { echo "config rejected: no good in $(basename {{.src}})" >&2; exit 3; }`,
			wantOut: "config rejected: no good in app.conf", wantErrs: []error{ErrCheckFailed}},
		{name: "check command not found",
			check:   `test -n "$(grep good {{.src}})" || weft-no-such-checker {{.src}}`,
			wantOut: "not found", wantErrs: []error{ErrCheckFailed}},
		{name: "check times out",
			check: `grep -q good {{.src}} || { echo started; sleep 60; }`, timeout: 2 * time.Second,
			wantOut: "started", wantErrs: []error{ErrCheckFailed, context.DeadlineExceeded}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			d := r.driver(t, Options{CheckCmd: tt.check, ReloadCmd: r.reloadCmd(), CmdTimeout: tt.timeout, Mode: 0o640})
			r.apply(t, d, good)
			r.write(t, "foreign.txt", "x")
			before := r.snapshot(t)

			res, err := d.Apply(t.Context(), bad)
			r.assertNoStage(t)
			for _, want := range tt.wantErrs {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want it to wrap %v", err, want)
				}
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantOut) {
				t.Errorf("err = %v, want it to contain %q", err, tt.wantOut)
			}
			if !strings.Contains(res.CheckOutput, tt.wantOut) {
				t.Errorf("CheckOutput = %q, want it to contain %q", res.CheckOutput, tt.wantOut)
			}
			if len(res.Written)+len(res.Removed) != 0 || res.Reloaded {
				t.Errorf("Result = %+v, want nothing done", res)
			}
			assertSameSnapshot(t, before, r.snapshot(t))
			if got := r.reloads(t); got != 1 {
				t.Errorf("%d reloads, want 1", got)
			}
		})
	}
}

func TestCheckSeesStagedBundle(t *testing.T) {
	t.Parallel()
	const check = `grep -q expected {{.src}} && test -f {{.dir}}/sub/c.conf && echo src={{.src}} && echo dir={{.dir}} && echo mode=$(stat -c %a {{.src}}) && echo dirmode=$(stat -c %a {{.dir}})`
	tests := []struct {
		name    string
		main    string
		files   []File
		wantSrc string
		wantErr error
	}{
		{name: "default main is the first file",
			files:   bundle("b.conf", "expected", "a.conf", "other", "sub/c.conf", "c"),
			wantSrc: "b.conf"},
		{name: "main option",
			main:    "a.conf",
			files:   bundle("b.conf", "other", "a.conf", "expected", "sub/c.conf", "c"),
			wantSrc: "a.conf"},
		{name: "main in a subdirectory",
			main:    "sub/c.conf",
			files:   bundle("sub/c.conf", "expected"),
			wantSrc: "sub/c.conf"},
		{name: "main without the expected content fails",
			main:    "a.conf",
			files:   bundle("b.conf", "expected", "a.conf", "other", "sub/c.conf", "c"),
			wantErr: ErrCheckFailed},
		{name: "main not in the bundle",
			main:    "missing.conf",
			files:   bundle("b.conf", "expected", "sub/c.conf", "c"),
			wantErr: ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A space in Dest checks that the substituted paths are quoted.
			r := rig{dest: filepath.Join(t.TempDir(), "dest with space")}
			if err := os.Mkdir(r.dest, 0o755); err != nil {
				t.Fatal(err)
			}
			d := r.driver(t, Options{CheckCmd: check, Main: tt.main, Mode: 0o640, DirMode: 0o750})
			res, err := d.Apply(t.Context(), tt.files)
			r.assertNoStage(t)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if entries, _ := os.ReadDir(r.dest); len(entries) != 0 {
					t.Errorf("Dest has %d entries after a failed check", len(entries))
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			vars := map[string]string{}
			for _, line := range strings.Split(res.CheckOutput, "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					vars[k] = v
				}
			}
			dir := vars["dir"]
			if filepath.Dir(dir) != r.dest || !strings.HasPrefix(filepath.Base(dir), stagePrefix) {
				t.Errorf("{{.dir}} = %q, want a staging directory in %q", dir, r.dest)
			}
			if want := filepath.Join(dir, filepath.FromSlash(tt.wantSrc)); vars["src"] != want {
				t.Errorf("{{.src}} = %q, want %q", vars["src"], want)
			}
			if vars["mode"] != "640" || vars["dirmode"] != "750" {
				t.Errorf("staged modes = %q (file), %q (dir), want 640 and 750 before the check", vars["mode"], vars["dirmode"])
			}
			r.assertBundle(t, tt.files)
		})
	}
}

func TestModeAndOwner(t *testing.T) {
	t.Parallel()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("lookup nobody: %v", err)
	}
	nobodyUID, nobodyGID := atoi(t, nobody.Uid), atoi(t, nobody.Gid)
	nobodyGroup, err := user.LookupGroupId(nobody.Gid)
	if err != nil {
		t.Fatalf("lookup group %s: %v", nobody.Gid, err)
	}
	me, myGroup := os.Getuid(), os.Getgid()

	tests := []struct {
		name              string
		opts              Options
		needRoot          bool
		mode, dirMode     fs.FileMode
		uid, gid          int
		externalUID, eGID int // what the external change sets
	}{
		{name: "defaults", mode: 0o644, dirMode: 0o755, uid: me, gid: myGroup},
		// 0664 and 0775 would lose group write under the usual umask unless
		// set explicitly.
		{name: "custom modes", opts: Options{Mode: 0o664, DirMode: 0o775}, mode: 0o664, dirMode: 0o775, uid: me, gid: myGroup},
		{name: "private modes", opts: Options{Mode: 0o600, DirMode: 0o700}, mode: 0o600, dirMode: 0o700, uid: me, gid: myGroup},
		{name: "owner and group by name", needRoot: true,
			opts: Options{Owner: "nobody", Group: nobodyGroup.Name, Mode: 0o640},
			mode: 0o640, dirMode: 0o755, uid: nobodyUID, gid: nobodyGID},
		{name: "owner by numeric id, group left as is", needRoot: true,
			opts: Options{Owner: nobody.Uid},
			mode: 0o644, dirMode: 0o755, uid: nobodyUID, gid: myGroup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.needRoot && os.Geteuid() != 0 {
				t.Skip("changing the owner needs root")
			}
			r := newRig(t)
			d := r.driver(t, tt.opts)
			files := bundle("a.conf", "a", "sub/b.conf", "b")
			r.apply(t, d, files)

			check := func(p string, wantMode fs.FileMode) {
				t.Helper()
				fi, err := os.Lstat(r.path(p))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != wantMode {
					t.Errorf("%s mode = %v, want %v", p, fi.Mode().Perm(), wantMode)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if int(st.Uid) != tt.uid || int(st.Gid) != tt.gid {
					t.Errorf("%s owner = %d:%d, want %d:%d", p, st.Uid, st.Gid, tt.uid, tt.gid)
				}
			}
			check("a.conf", tt.mode)
			check("sub/b.conf", tt.mode)
			check("sub", tt.dirMode)

			// Someone changes the mode of one file and, where ownership is
			// managed, the owner of another.
			if err := os.Chmod(r.path("a.conf"), 0o666); err != nil {
				t.Fatal(err)
			}
			wantDrift := []string{"a.conf"}
			if tt.opts.Owner != "" {
				if err := os.Chown(r.path("sub/b.conf"), me+1, -1); err != nil {
					t.Fatal(err)
				}
				wantDrift = append(wantDrift, "sub/b.conf")
			}
			drift, err := d.Drift(files)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(drift, wantDrift) {
				t.Errorf("Drift = %q, want %q", drift, wantDrift)
			}
			res := r.apply(t, d, files)
			if !slices.Equal(res.Written, wantDrift) {
				t.Errorf("repair Written = %q, want %q", res.Written, wantDrift)
			}
			check("a.conf", tt.mode)
			check("sub/b.conf", tt.mode)
		})
	}
}

func TestMinReloadIntervalDelaysReload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		interval time.Duration
		wantWait bool
	}{
		{name: "second reload waits", interval: time.Hour, wantWait: true},
		{name: "no interval", interval: 0, wantWait: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			d := r.driver(t, Options{ReloadCmd: r.reloadCmd(), MinReloadInterval: tt.interval})
			asked := make(chan time.Duration, 1)
			release := make(chan struct{})
			d.waitFor = func(ctx context.Context, wait time.Duration) error {
				asked <- wait
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}

			r.apply(t, d, bundle("a.conf", "v1"))
			select {
			case w := <-asked:
				t.Fatalf("the first reload waited %s", w)
			default:
			}

			done := make(chan Result, 1)
			errc := make(chan error, 1)
			go func() {
				res, err := d.Apply(context.Background(), bundle("a.conf", "v2"))
				done <- res
				errc <- err
			}()

			if tt.wantWait {
				var wait time.Duration
				select {
				case wait = <-asked:
				case <-time.After(10 * time.Second):
					t.Fatal("the second reload did not wait")
				}
				if wait <= 0 || wait > tt.interval {
					t.Errorf("waited %s, want a remainder of %s", wait, tt.interval)
				}
				// The new file is in place while the reload waits.
				if got := r.read(t, "a.conf"); got != "v2" {
					t.Errorf("a.conf = %q while waiting, want v2", got)
				}
				if err := appendLine(r.log, "marker"); err != nil {
					t.Fatal(err)
				}
				close(release)
			}
			res := <-done
			if err := <-errc; err != nil {
				t.Fatalf("second Apply: %v", err)
			}
			if !res.Reloaded {
				t.Error("the second Apply did not reload")
			}
			want := []string{"reload", "reload"}
			if tt.wantWait {
				want = []string{"reload", "marker", "reload"}
			}
			if got := r.lines(t); !slices.Equal(got, want) {
				t.Errorf("log = %q, want %q", got, want)
			}
			select {
			case w := <-asked:
				t.Errorf("unexpected wait of %s", w)
			default:
			}
		})
	}
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func TestMinReloadIntervalWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	opts := Options{ReloadCmd: r.reloadCmd(), MinReloadInterval: time.Hour}
	d := r.driver(t, opts)
	r.apply(t, d, bundle("a.conf", "v1"))

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	res, err := d.Apply(ctx, bundle("a.conf", "v2"))
	r.assertNoStage(t)
	if !errors.Is(err, ErrReloadFailed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrReloadFailed and the context's error", err)
	}
	if !slices.Equal(res.Written, []string{"a.conf"}) || res.Reloaded {
		t.Errorf("Result = %+v, want a.conf written and no reload", res)
	}
	if r.read(t, "a.conf") != "v2" || r.reloads(t) != 1 {
		t.Errorf("a.conf = %q with %d reloads, want v2 installed and 1 reload", r.read(t, "a.conf"), r.reloads(t))
	}

	// The reload is still owed: a new driver (a restart) with nothing to
	// write runs it.
	d2 := r.driver(t, opts)
	res = r.apply(t, d2, bundle("a.conf", "v2"))
	if len(res.Written) != 0 || !res.Reloaded || r.reloads(t) != 2 {
		t.Errorf("Result = %+v with %d reloads, want only the owed reload", res, r.reloads(t))
	}
}

func TestReloadFailure(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	flag := filepath.Join(t.TempDir(), "fail")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := r.driver(t, Options{
		ReloadCmd: "if [ -e " + shellQuote(flag) + " ]; then echo 'reload exploded' >&2; exit 2; fi; " + r.reloadCmd(),
	})
	files := bundle("a.conf", "a", "b.conf", "b")

	res, err := d.Apply(t.Context(), files)
	r.assertNoStage(t)
	if !errors.Is(err, ErrReloadFailed) || !strings.Contains(err.Error(), "reload exploded") {
		t.Fatalf("err = %v, want ErrReloadFailed with the output", err)
	}
	if res.ReloadOutput != "reload exploded" || res.Reloaded {
		t.Errorf("ReloadOutput = %q, Reloaded = %v", res.ReloadOutput, res.Reloaded)
	}
	if !slices.Equal(res.Written, []string{"a.conf", "b.conf"}) {
		t.Errorf("Written = %q", res.Written)
	}
	r.assertBundle(t, files)

	// Nothing to write, but the reload is owed: it is retried.
	res, err = d.Apply(t.Context(), files)
	if !errors.Is(err, ErrReloadFailed) || len(res.Written) != 0 {
		t.Fatalf("retry: err = %v, Written = %q, want the reload retried and failing", err, res.Written)
	}

	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	res = r.apply(t, d, files)
	if !res.Reloaded || len(res.Written) != 0 || r.reloads(t) != 1 {
		t.Errorf("Result = %+v with %d reloads, want the owed reload", res, r.reloads(t))
	}
	res = r.apply(t, d, files)
	if res.Reloaded || r.reloads(t) != 1 {
		t.Errorf("Result = %+v with %d reloads, want nothing once the reload succeeded", res, r.reloads(t))
	}
}

func TestBadPaths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files []File
	}{
		{"empty", bundle("", "x")},
		{"absolute", bundle("/etc/passwd", "x")},
		{"parent", bundle("../x", "x")},
		{"parent inside", bundle("a/../../x", "x")},
		{"parent that stays inside", bundle("a/../b", "x")},
		{"dot", bundle(".", "x")},
		{"dot element", bundle("./a", "x")},
		{"empty element", bundle("a//b", "x")},
		{"trailing slash", bundle("a/", "x")},
		{"backslash", bundle(`a\..\b`, "x")},
		{"NUL", bundle("a\x00b", "x")},
		{"manifest", bundle(manifestName, "x")},
		{"staging name", bundle(stagePrefix+"x/a", "x")},
		{"twice", bundle("a", "x", "a", "y")},
		{"file and directory", bundle("a", "x", "a/b", "y")},
		{"bad path after good ones", bundle("ok", "x", "../../x", "y")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			d := r.driver(t, Options{ReloadCmd: r.reloadCmd()})
			if _, err := d.Apply(t.Context(), tt.files); !errors.Is(err, ErrBadPath) {
				t.Errorf("Apply err = %v, want ErrBadPath", err)
			}
			if _, err := d.Drift(tt.files); !errors.Is(err, ErrBadPath) {
				t.Errorf("Drift err = %v, want ErrBadPath", err)
			}
			if entries, _ := os.ReadDir(r.dest); len(entries) != 0 || r.reloads(t) != 0 {
				t.Errorf("Dest has %d entries and %d reloads, want nothing", len(entries), r.reloads(t))
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		opts Options
		ok   bool
	}{
		{name: "minimal", opts: Options{Dest: dir}, ok: true},
		{name: "relative dest", opts: Options{Dest: "."}, ok: true},
		{name: "full", opts: Options{Dest: dir, Owner: "root", Group: "0", Mode: 0o600, DirMode: 0o750,
			CheckCmd: "test -f {{.src}} && ls {{.dir}}", ReloadCmd: "true", MinReloadInterval: time.Second,
			CmdTimeout: time.Minute, Main: "haproxy.cfg"}, ok: true},
		{name: "no dest", opts: Options{}},
		{name: "blank dest", opts: Options{Dest: "  "}},
		{name: "unknown owner", opts: Options{Dest: dir, Owner: "weft-no-such-user"}},
		{name: "unknown group", opts: Options{Dest: dir, Group: "weft-no-such-group"}},
		{name: "negative owner id", opts: Options{Dest: dir, Owner: "-1"}},
		{name: "setuid mode", opts: Options{Dest: dir, Mode: 0o644 | fs.ModeSetuid}},
		{name: "directory bit in mode", opts: Options{Dest: dir, Mode: fs.ModeDir | 0o644}},
		{name: "dir mode without owner access", opts: Options{Dest: dir, DirMode: 0o500}},
		{name: "negative interval", opts: Options{Dest: dir, MinReloadInterval: -time.Second}},
		{name: "negative timeout", opts: Options{Dest: dir, CmdTimeout: -time.Second}},
		{name: "check does not parse", opts: Options{Dest: dir, CheckCmd: "test {{.src"}},
		{name: "check uses an unknown variable", opts: Options{Dest: dir, CheckCmd: "test {{.source}}"}},
		{name: "bad main", opts: Options{Dest: dir, Main: "../haproxy.cfg"}},
		{name: "named", opts: Options{Dest: dir, Name: "app-a_1"}, ok: true},
		{name: "name with a dot", opts: Options{Dest: dir, Name: "app.a"}},
		{name: "name with a slash", opts: Options{Dest: dir, Name: "app/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := New(tt.opts)
			if tt.ok {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				o := d.Options()
				if !filepath.IsAbs(o.Dest) || o.Mode == 0 || o.DirMode == 0 || o.CmdTimeout <= 0 {
					t.Errorf("Options = %+v, want an absolute Dest and defaults filled in", o)
				}
				return
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("err = %v, want ErrConfig", err)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	d, err := New(Options{Dest: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	o := d.Options()
	if o.Mode != DefaultMode || o.DirMode != DefaultDirMode || o.CmdTimeout != DefaultCmdTimeout {
		t.Errorf("Options = %+v, want the defaults", o)
	}
}

func TestDriftAndRepair(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	d := r.driver(t, Options{ReloadCmd: r.reloadCmd()})
	files := bundle("a.conf", "a", "b.conf", "b", "maps/c.map", "c", "maps/d.map", "d", "e.conf", "e")
	r.apply(t, d, files)

	drift, err := d.Drift(files)
	if err != nil || len(drift) != 0 {
		t.Fatalf("Drift after Apply = %q, %v; want none", drift, err)
	}

	// Someone edits the instance.
	r.write(t, "a.conf", "edited")
	if err := os.Remove(r.path("maps/c.map")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(r.path("maps/d.map"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(r.path("e.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b.conf", r.path("e.conf")); err != nil {
		t.Fatal(err)
	}
	before := r.snapshot(t)

	drift, err = d.Drift(files)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.conf", "e.conf", "maps/c.map", "maps/d.map"}
	if !slices.Equal(drift, want) {
		t.Errorf("Drift = %q, want %q", drift, want)
	}
	assertSameSnapshot(t, before, r.snapshot(t))
	if r.reloads(t) != 1 {
		t.Errorf("Drift reloaded")
	}

	res := r.apply(t, d, files)
	if !slices.Equal(res.Written, want) || !res.Reloaded || r.reloads(t) != 2 {
		t.Errorf("repair: Result = %+v with %d reloads, want %q written and a reload", res, r.reloads(t), want)
	}
	r.assertBundle(t, files)
	if fi, err := os.Lstat(r.path("e.conf")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("e.conf is not a regular file again: %v", err)
	}
	if drift, err := d.Drift(files); err != nil || len(drift) != 0 {
		t.Errorf("Drift after repair = %q, %v; want none", drift, err)
	}
}

func TestLayoutChanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		first   []File
		setup   func(t *testing.T, r rig)
		second  []File
		wantErr error
		written []string
		removed []string
	}{
		{name: "foreign directory where a file goes",
			setup:  func(t *testing.T, r rig) { r.write(t, "a.conf/inside", "x") },
			second: bundle("a.conf", "a", "b.conf", "b"), wantErr: ErrConflict},
		{name: "foreign file where a directory goes",
			setup:  func(t *testing.T, r rig) { r.write(t, "maps", "x") },
			second: bundle("a.conf", "a", "maps/hosts.map", "h"), wantErr: ErrConflict},
		{name: "owned file becomes a directory",
			first:   bundle("maps", "x"),
			second:  bundle("maps/hosts.map", "h"),
			written: []string{"maps/hosts.map"}, removed: []string{"maps"}},
		{name: "owned directory becomes a file",
			first:   bundle("conf/a", "a", "conf/sub/b", "b"),
			second:  bundle("conf", "c"),
			written: []string{"conf"}, removed: []string{"conf/a", "conf/sub/b"}},
		{name: "owned directory holding a foreign file becomes a file",
			first:   bundle("conf/a", "a"),
			setup:   func(t *testing.T, r rig) { r.write(t, "conf/foreign", "x") },
			second:  bundle("conf", "c"),
			wantErr: ErrConflict},
		{name: "existing foreign directories are used, not owned",
			setup:   func(t *testing.T, r rig) { r.write(t, "etc/foreign", "x") },
			first:   bundle("etc/a.conf", "a"),
			second:  bundle("b.conf", "b"),
			written: []string{"b.conf"}, removed: []string{"etc/a.conf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			d := r.driver(t, Options{ReloadCmd: r.reloadCmd()})
			if tt.setup != nil && tt.first == nil {
				tt.setup(t, r)
			}
			if tt.first != nil {
				r.apply(t, d, tt.first)
				if tt.setup != nil {
					tt.setup(t, r)
				}
			}
			reloads := r.reloads(t)
			before := r.snapshot(t)
			res, err := d.Apply(t.Context(), tt.second)
			r.assertNoStage(t)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				assertSameSnapshot(t, before, r.snapshot(t))
				if r.reloads(t) != reloads {
					t.Error("reloaded after a conflict")
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if !slices.Equal(res.Written, tt.written) || !slices.Equal(res.Removed, tt.removed) {
				t.Errorf("Written = %q, Removed = %q; want %q, %q", res.Written, res.Removed, tt.written, tt.removed)
			}
			r.assertBundle(t, tt.second)
			if r.exists("etc") && !r.exists("etc/foreign") {
				t.Error("foreign file removed")
			}
			if r.exists("conf/sub") {
				t.Error("owned directory not removed")
			}
		})
	}
}

func TestCancelKillsCheck(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	aux := t.TempDir()
	shellPID, childPID := filepath.Join(aux, "shell"), filepath.Join(aux, "child")
	d := r.driver(t, Options{
		ReloadCmd: r.reloadCmd(),
		CheckCmd:  "echo $$ > " + shellQuote(shellPID) + "; sleep 300 & echo $! > " + shellQuote(childPID) + "; wait",
	})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := d.Apply(ctx, bundle("a.conf", "a"))
		errc <- err
	}()
	shell, child := atoi(t, waitForFile(t, shellPID)), atoi(t, waitForFile(t, childPID))
	cancel()

	select {
	case err := <-errc:
		if !errors.Is(err, ErrCheckFailed) || !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want ErrCheckFailed and context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Apply did not return after the context was cancelled")
	}
	processGone(t, shell)
	processGone(t, child)
	r.assertNoStage(t)
	if r.exists("a.conf") || r.reloads(t) != 0 {
		t.Error("the cancelled check let the bundle through")
	}
}

func TestStagingIsCleanedUp(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// Leftovers of an interrupted run.
	r.write(t, stagePrefix+"OLD/a.conf", "half")
	r.write(t, stagePrefix+"tmp-OLD", "half a manifest")
	d := r.driver(t, Options{})
	r.apply(t, d, bundle("a.conf", "a"))
	if !r.exists("a.conf") {
		t.Error("a.conf not delivered")
	}
}

func TestManifestProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
	}{
		{"not json", "{oops"},
		{"unknown version", `{"version":9,"files":[]}`},
		{"escaping path", `{"version":1,"files":["../../etc/passwd"]}`},
		{"absolute path", `{"version":1,"files":["/etc/passwd"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			r.write(t, manifestName, tt.content)
			d := r.driver(t, Options{ReloadCmd: r.reloadCmd()})
			if _, err := d.Apply(t.Context(), bundle("a.conf", "a")); err == nil || !strings.Contains(err.Error(), "manifest") {
				t.Errorf("err = %v, want a manifest error", err)
			}
			if r.exists("a.conf") || r.reloads(t) != 0 {
				t.Error("delivered despite an unreadable manifest")
			}
		})
	}
}

func TestApplyIsSerialized(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	lock := filepath.Join(t.TempDir(), "lock")
	// Both commands fail if another command of the driver is running.
	guard := func(cmd string) string {
		return "mkdir " + shellQuote(lock) + " || { echo overlap; exit 1; }; sleep 0.02; " + cmd + "; rmdir " + shellQuote(lock)
	}
	d := r.driver(t, Options{CheckCmd: guard("true"), ReloadCmd: guard(r.reloadCmd())})

	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = d.Apply(t.Context(), bundle("a.conf", "version "+strconv.Itoa(i), "b.conf", "b"))
		})
		wg.Go(func() {
			if _, err := d.Drift(bundle("a.conf", "x")); err != nil {
				t.Errorf("Drift: %v", err)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Apply %d: %v", i, err)
		}
	}
	if got := r.reloads(t); got != n {
		t.Errorf("%d reloads, want %d (every Apply changed a.conf)", got, n)
	}
	r.assertNoStage(t)

	// Waiting for a busy driver respects the context.
	d.sem <- struct{}{}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.Apply(ctx, bundle("a.conf", "a")); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled while the driver is busy", err)
	}
	d.unlock()
}

func TestOutputIsTrimmed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	d := r.driver(t, Options{CheckCmd: `head -c 100000 /dev/zero | tr '\0' x; echo; echo the-end; exit 1`})
	_, err := d.Apply(t.Context(), bundle("a.conf", "a"))
	if !errors.Is(err, ErrCheckFailed) {
		t.Fatalf("err = %v", err)
	}
	msg := err.Error()
	if len(msg) > outputHead+outputTail+200 || !strings.Contains(msg, "bytes omitted") || !strings.HasSuffix(msg, "the-end") {
		t.Errorf("error of %d bytes, want the head and the tail of the output ending in the-end", len(msg))
	}
}

func TestNamedDriversShareDest(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	a := r.driver(t, Options{Name: "app-a", CheckCmd: "test -s {{.src}}"})
	b := r.driver(t, Options{Name: "app-b", Main: "b.conf"})
	r.apply(t, a, bundle("a.conf", "a1"))
	r.apply(t, b, bundle("b.conf", "b1"))
	r.assertBundle(t, bundle("a.conf", "a1", "b.conf", "b1"))

	// b is in the middle of a delivery when a delivers: a leaves b's
	// staging entry alone, and removing a.conf from a's bundle leaves
	// b.conf alone.
	r.write(t, ".weft-stage-app-b.INFLIGHT/b.conf", "b2")
	if _, err := a.Apply(t.Context(), bundle("a2.conf", "a2")); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !r.exists(".weft-stage-app-b.INFLIGHT/b.conf") {
		t.Error("driver app-a removed the staging entry of driver app-b")
	}
	if r.exists("a.conf") {
		t.Error("a.conf left a's bundle but is still in Dest")
	}
	r.assertBundle(t, bundle("a2.conf", "a2", "b.conf", "b1"))

	for _, tt := range []struct {
		manifest string
		files    []string
	}{
		{".weft-manifest-app-a.json", []string{"a2.conf"}},
		{".weft-manifest-app-b.json", []string{"b.conf"}},
	} {
		var m manifest
		if err := json.Unmarshal([]byte(r.read(t, tt.manifest)), &m); err != nil {
			t.Fatalf("%s: %v", tt.manifest, err)
		}
		if !slices.Equal(m.Files, tt.files) {
			t.Errorf("%s lists %v, want %v", tt.manifest, m.Files, tt.files)
		}
	}
	if r.exists(manifestName) {
		t.Errorf("named drivers wrote the unnamed manifest %s", manifestName)
	}
	if err := os.RemoveAll(r.path(".weft-stage-app-b.INFLIGHT")); err != nil {
		t.Fatal(err)
	}
	if res := r.apply(t, b, bundle("b.conf", "b1")); len(res.Written) != 0 || res.Unchanged != 1 {
		t.Errorf("re-applying b = %+v, want nothing written", res)
	}
}
