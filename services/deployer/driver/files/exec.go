package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Output kept from a command: its beginning and its end.
const (
	outputHead = 8 << 10
	outputTail = 8 << 10
)

// errCmdTimeout marks a command stopped by Options.CmdTimeout rather than by
// the caller's context.
var errCmdTimeout = errors.New("command timeout")

// run runs command with /bin/sh -c in Dest and returns its combined output,
// trimmed to a sane size.
//
// The output goes to an unlinked temporary file rather than a pipe, so a
// daemon started by the command that keeps its stdout cannot hold up Wait.
func (d *Driver) run(ctx context.Context, command string) (string, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, d.opts.CmdTimeout, errCmdTimeout)
	defer cancel()

	out, err := os.CreateTemp("", "weft-cmd-*")
	if err != nil {
		return "", fmt.Errorf("output file: %w", err)
	}
	defer out.Close()
	if err := os.Remove(out.Name()); err != nil {
		return "", fmt.Errorf("output file: %w", err)
	}

	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Dir = d.opts.Dest
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.WaitDelay = time.Second
	killGroupOnCancel(cmd)
	runErr := cmd.Run()

	output, readErr := readOutput(out)
	if runErr != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			if context.Cause(ctx) == errCmdTimeout {
				runErr = fmt.Errorf("timed out after %s: %w (%v)", d.opts.CmdTimeout, ctxErr, runErr)
			} else {
				runErr = fmt.Errorf("%w (%v)", ctxErr, runErr)
			}
		}
		return output, runErr
	}
	if readErr != nil {
		return output, fmt.Errorf("read output: %w", readErr)
	}
	return output, nil
}

// readOutput reads the beginning and the end of a command's output file.
func readOutput(f *os.File) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	size := fi.Size()
	if size <= outputHead+outputTail {
		b := make([]byte, size)
		n, err := f.ReadAt(b, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		return tidyOutput(string(b[:n])), nil
	}
	head := make([]byte, outputHead)
	if _, err := f.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	tail := make([]byte, outputTail)
	n, err := f.ReadAt(tail, size-outputTail)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	omitted := size - outputHead - int64(n)
	return tidyOutput(fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", head, omitted, tail[:n])), nil
}

func tidyOutput(s string) string {
	return strings.ToValidUTF8(strings.TrimRight(s, " \t\r\n"), "\uFFFD")
}

// withOutput appends a command's output to an error message.
func withOutput(out string) string {
	if out == "" {
		return " (no output)"
	}
	return "; output:\n" + out
}
