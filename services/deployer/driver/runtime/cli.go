package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// maxAnswer bounds what is read from a socket for one command.
const maxAnswer = 64 << 20

// sockClient talks to one HAProxy CLI socket (master or worker).
type sockClient struct {
	path    string
	timeout time.Duration
}

// dial connects to the socket; the connection's deadline follows ctx and the
// command timeout.
func (c sockClient) dial(ctx context.Context) (*net.UnixConn, func() bool, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", c.path)
	if err != nil {
		return nil, nil, err
	}
	uc := conn.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	return uc, stop, nil
}

func (c sockClient) deadline(ctx context.Context) time.Time {
	dl := time.Now().Add(c.timeout)
	if ctxDl, ok := ctx.Deadline(); ok && ctxDl.Before(dl) {
		return ctxDl
	}
	return dl
}

// do runs one command on a fresh connection and returns the whole answer.
// The write side is shut down after the command: HAProxy's master CLI only
// ends the exchange then.
func (c sockClient) do(ctx context.Context, cmd string) (string, error) {
	conn, stop, err := c.dial(ctx)
	if err != nil {
		return "", err
	}
	defer stop()
	defer conn.Close()
	if err := conn.SetDeadline(c.deadline(ctx)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", ctxErr(ctx, err)
	}
	if err := conn.CloseWrite(); err != nil {
		return "", ctxErr(ctx, err)
	}
	b, err := io.ReadAll(io.LimitReader(conn, maxAnswer))
	if err != nil {
		return string(b), ctxErr(ctx, err)
	}
	return string(b), nil
}

// send writes one command and does not wait for an answer (used for the
// master's "reload", whose connection the re-executed master may keep open).
func (c sockClient) send(ctx context.Context, cmd string) error {
	conn, stop, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer stop()
	defer conn.Close()
	if err := conn.SetDeadline(c.deadline(ctx)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return ctxErr(ctx, err)
	}
	if err := conn.CloseWrite(); err != nil {
		return ctxErr(ctx, err)
	}
	return nil
}

func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}

// session is an interactive ("prompt" mode) connection to a worker CLI: many
// commands on one connection, each answer ending with the "> " prompt.
type session struct {
	c    sockClient
	ctx  context.Context
	conn *net.UnixConn
	stop func() bool
	buf  []byte
}

func (c sockClient) session(ctx context.Context) (*session, error) {
	conn, stop, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	s := &session{c: c, ctx: ctx, conn: conn, stop: stop, buf: make([]byte, 0, 4096)}
	if _, err := s.exec("prompt", nil); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *session) close() {
	s.stop()
	_ = s.conn.Close()
}

// exec runs a command, with an optional payload (sent after " <<" and ended
// by an empty line, so it must not contain one), and returns the answer
// without the prompt and the payload continuation prompts.
func (s *session) exec(cmd string, payload []byte) (string, error) {
	if err := s.conn.SetDeadline(s.c.deadline(s.ctx)); err != nil {
		return "", err
	}
	var req bytes.Buffer
	req.WriteString(cmd)
	if payload != nil {
		req.WriteString(" <<\n")
		req.Write(payload)
		if len(payload) > 0 && payload[len(payload)-1] != '\n' {
			req.WriteByte('\n')
		}
	}
	req.WriteByte('\n')
	if _, err := s.conn.Write(req.Bytes()); err != nil {
		return "", ctxErr(s.ctx, err)
	}
	s.buf = s.buf[:0]
	chunk := make([]byte, 4096)
	for {
		n, err := s.conn.Read(chunk)
		s.buf = append(s.buf, chunk[:n]...)
		if bytes.Equal(s.buf, []byte("> ")) || bytes.HasSuffix(s.buf, []byte("\n> ")) {
			break
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return string(s.buf), ctxErr(s.ctx, err)
		}
		if len(s.buf) > maxAnswer {
			return "", fmt.Errorf("answer to %q is too long", cmd)
		}
	}
	out := string(s.buf[:len(s.buf)-2])
	for strings.HasPrefix(out, "+ ") {
		out = out[2:]
	}
	return strings.TrimSpace(out), nil
}

// procState is the master's "show proc".
type procState struct {
	master  int
	reloads int
	failed  int   // failed reloads since the last successful one
	workers []int // current workers
	old     []int // workers of earlier generations still finishing
}

// errBusy: the master answered nothing, as it does while it re-executes.
var errBusy = errors.New("master CLI answered nothing (re-executing)")

// parseShowProc parses the master's answer to "show proc" (2.6 format):
//
//	#<PID>  <type>  <reloads>  <uptime>  <version>
//	1234    master  2 [failed: 0]  0d00h00m10s  2.6.12
//	# workers
//	1301    worker  0  0d00h00m03s  2.6.12
//	# old workers
//	1286    worker  2  0d00h00m10s  2.6.12
//	# programs
func parseShowProc(out string) (procState, error) {
	if strings.TrimSpace(out) == "" {
		return procState{}, errBusy
	}
	var st procState
	section := ""
	seenMaster := false
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "#<PID>"):
			continue
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return procState{}, fmt.Errorf("unexpected show proc line %q", line)
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			return procState{}, fmt.Errorf("unexpected show proc line %q", line)
		}
		switch {
		case f[1] == "master":
			st.master = pid
			if st.reloads, err = strconv.Atoi(f[2]); err != nil {
				return procState{}, fmt.Errorf("unexpected show proc line %q", line)
			}
			if i := strings.Index(line, "[failed:"); i >= 0 {
				rest := strings.TrimSpace(line[i+len("[failed:"):])
				num, _, _ := strings.Cut(rest, "]")
				st.failed, _ = strconv.Atoi(strings.TrimSpace(num))
			}
			seenMaster = true
		case f[1] == "worker" && section == "workers":
			st.workers = append(st.workers, pid)
		case f[1] == "worker" && section == "old workers":
			st.old = append(st.old, pid)
		}
	}
	if !seenMaster {
		return procState{}, fmt.Errorf("no master in show proc answer %q", trimAnswer(out))
	}
	return st, nil
}

// infoPid extracts "Pid: N" from a "show info" answer.
func infoPid(out string) int {
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Pid: "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// infoStoppedListening reads a worker's "show info": it reports true when
// the worker is stopping ("Stopping: 1", a soft stop after a reload) and
// has closed its listeners: the only ones left are unstoppable ("Listeners"
// not above "Unstoppable Jobs"; the worker's end of the master CLI is one).
func infoStoppedListening(out string) bool {
	fields := map[string]int{}
	for line := range strings.SplitSeq(out, "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			fields[k] = n
		}
	}
	listeners, ok1 := fields["Listeners"]
	unstoppable, ok2 := fields["Unstoppable Jobs"]
	return fields["Stopping"] == 1 && ok1 && ok2 && listeners <= unstoppable
}

// escapeArg escapes a word for the CLI's tokenizer, which splits on spaces
// and tabs, ends a command at ';' and honours backslashes.
func escapeArg(s string) string {
	if !strings.ContainsAny(s, " \t;\\") {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == ' ' || r == '\t' || r == ';' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// trimAnswer shortens an answer for an error message.
func trimAnswer(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}
