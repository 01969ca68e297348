package runtime

import (
	"bytes"
	"context"
	"fmt"
	"strings"
)

// op is one Runtime API command.
type op struct {
	// cmd is the command line.
	cmd     string
	payload []byte
	// show is the command as reported in Result.RuntimeOps, with
	// bundle-relative paths and unescaped words.
	show string
	// ok tells whether HAProxy's answer reports success.
	ok func(answer string) bool
	// version: the answer carries a map version ("prepare map"), which
	// the following ops with withVersion get.
	version     bool
	withVersion func(version string) (cmd, show string)
	// abort runs, best effort, when this command fails, to drop what an
	// earlier command left half done.
	abort string
}

func emptyAnswer(out string) bool { return out == "" }

// runtimeError is a command HAProxy refused, or could not be sent.
type runtimeError struct {
	cmd, answer string
	err         error
}

func (e *runtimeError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("%s: %v", e.cmd, e.err)
	}
	return fmt.Sprintf("%s: %s", e.cmd, trimAnswer(e.answer))
}

func (e *runtimeError) Unwrap() error { return e.err }

// runOps sends the commands in order on one admin connection and stops at
// the first one HAProxy refuses. It returns the commands that were accepted.
func (d *Driver) runOps(ctx context.Context, ops []op) ([]string, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	s, err := d.admin.session(ctx)
	if err != nil {
		return nil, &runtimeError{cmd: "connect to the admin socket", err: err}
	}
	defer s.close()
	var done []string
	version := ""
	for _, o := range ops {
		cmd, show := o.cmd, o.show
		if o.withVersion != nil {
			cmd, show = o.withVersion(version)
		}
		out, err := s.exec(cmd, o.payload)
		if err == nil && !o.ok(out) {
			if o.abort != "" {
				_, _ = s.exec(o.abort, nil) // best effort: a reload follows and drops the transaction anyway
			}
			return done, &runtimeError{cmd: show, answer: out}
		}
		if err != nil {
			return done, &runtimeError{cmd: show, err: err}
		}
		if o.version {
			if version, err = parseVersion(out); err != nil {
				return done, &runtimeError{cmd: show, err: err}
			}
			show = strings.TrimSpace(show + " (version " + version + ")")
		}
		done = append(done, show)
	}
	return done, nil
}

// certOps replaces a loaded certificate in a transaction and commits it.
func certOps(ref, shown string, pem []byte) []op {
	return []op{
		{
			cmd: "set ssl cert " + escapeArg(ref), payload: payloadLines(pem),
			show: "set ssl cert " + shown,
			ok: func(out string) bool {
				return strings.Contains(out, "Transaction created") || strings.Contains(out, "Transaction updated")
			},
			abort: "abort ssl cert " + escapeArg(ref),
		},
		{
			cmd: "commit ssl cert " + escapeArg(ref), show: "commit ssl cert " + shown,
			ok:    func(out string) bool { return strings.Contains(out, "Success!") },
			abort: "abort ssl cert " + escapeArg(ref),
		},
	}
}

// payloadLines drops the empty lines (an empty line ends a CLI payload) and
// carriage returns of a PEM file, which its parser does not need.
func payloadLines(b []byte) []byte {
	var out bytes.Buffer
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}
