package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Exit codes of weft. Every command exits 0 on success and on -h.
const (
	// ExitFailed: the command could not do its work (an error, printed on
	// stderr), or `weft validate` refused the bundle.
	ExitFailed = 1
	// ExitUsage: the command line is wrong (unknown command or flag,
	// missing argument); the usage is printed on stderr.
	ExitUsage = 2
	// ExitFailing: `weft status` ran, but a target's last render,
	// validation or deploy failed (each is named on stderr).
	ExitFailing = 3
)

// exitError is an error with the exit code it asks for; quiet ones were
// already reported by the command.
type exitError struct {
	code  int
	err   error
	quiet bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError makes err exit with ExitUsage.
func usageError(err error) error { return &exitError{code: ExitUsage, err: err} }

// errHelp ends a command that printed its usage because -h asked for it.
var errHelp = errors.New("help requested")

// exitCode is the exit code of run's result, and the text to print on
// stderr ("" for none): each line of the error prefixed with "weft: ", so
// every problem of a configuration is a line of its own.
func exitCode(err error) (int, string) {
	if err == nil || errors.Is(err, errHelp) {
		return 0, ""
	}
	code := ExitFailed
	if e, ok := errors.AsType[*exitError](err); ok {
		if e.quiet {
			return e.code, ""
		}
		code = e.code
	}
	return code, "weft: " + strings.ReplaceAll(err.Error(), "\n", "\nweft: ")
}

// command describes one subcommand for its usage text.
type command struct {
	name, args, summary string
}

// newFlags returns the flag set of a command whose usage (-h) lists its
// arguments, what it does and its flags.
func newFlags(c command) *flag.FlagSet {
	fs := flag.NewFlagSet("weft "+c.name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: weft %s [flags]%s\n\n%s\n", c.name, c.args, c.summary)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprint(w, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args with fs. -h prints the usage on stdout and
// returns errHelp; a bad flag prints the problem and the usage on stderr
// and returns a usage error.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var out bytes.Buffer
	fs.SetOutput(&out)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = stdout.Write(out.Bytes())
		return errHelp
	case err != nil:
		_, _ = stderr.Write(out.Bytes())
		return &exitError{code: ExitUsage, err: err, quiet: true}
	}
	return nil
}

// version is weft's version, set at build time with
// -ldflags "-X main.version=v1.2.3"; empty, the module version the Go
// toolchain recorded is used.
var version = ""

// versionText is what `weft version` prints: the version, the commit it
// was built from (when the toolchain recorded it) and the Go version.
func versionText() string {
	v := version
	var extra []string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if modified == "true" {
				rev += "+dirty"
			}
			extra = append(extra, "commit "+rev)
		}
		extra = append(extra, bi.GoVersion)
	}
	if v == "" {
		v = "(devel)"
	}
	if len(extra) == 0 {
		return "weft " + v + "\n"
	}
	return fmt.Sprintf("weft %s (%s)\n", v, strings.Join(extra, ", "))
}
