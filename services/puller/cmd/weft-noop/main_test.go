package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRun: no arguments exits 0, install copies the program (executable,
// not writable), anything else is a usage error.
func TestRun(t *testing.T) {
	if err := run([]string{"weft-noop"}); err != nil {
		t.Errorf("no arguments: %v", err)
	}
	dest := filepath.Join(t.TempDir(), "noop")
	if err := run([]string{os.Args[0], "install", dest}); err != nil {
		t.Fatalf("install: %v", err)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Stat(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o555 || fi.Size() != self.Size() {
		t.Errorf("installed %v %d bytes, want -r-xr-xr-x %d bytes", fi.Mode(), fi.Size(), self.Size())
	}
	for _, args := range [][]string{{"weft-noop", "install"}, {"weft-noop", "echo", "hi"}} {
		if err := run(args); err == nil {
			t.Errorf("%v: no usage error", args)
		}
	}
	if err := run([]string{"weft-noop", "install", filepath.Join(t.TempDir(), "missing", "noop")}); err == nil {
		t.Error("install into a missing folder: no error")
	}
}
