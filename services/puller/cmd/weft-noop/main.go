// Command weft-noop is the program a pull Job's target-image containers run
// in place of the image's own entrypoint: it exits 0, so a Job succeeds once
// its images are pulled, with no shell or libc needed in the image
// (distroless and scratch images included). It is built static
// (CGO_ENABLED=0, `make build`) and ships in weft's image.
//
//	weft-noop                  exit 0
//	weft-noop install DEST     copy this program to DEST (mode 0555) and exit
//
// A pull Job's init container, running weft's image, installs it into an
// emptyDir that the target-image containers mount and run it from.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "weft-noop:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) <= 1:
		return nil
	case len(args) == 3 && args[1] == "install":
		return install(args[0], args[2])
	}
	return fmt.Errorf("usage: weft-noop [install DEST]; got %q", args[1:])
}

// install copies this program to dest through a temporary file in dest's
// folder, so dest is never a partial program.
func install(arg0, dest string) error {
	self, err := os.Executable()
	if err != nil {
		// No /proc (a chroot): the path this program was started by.
		self = arg0
	}
	in, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".weft-noop-*")
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install: copy %s: %w", self, err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}
