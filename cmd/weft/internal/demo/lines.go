package demo

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
)

// keptLines is how many of the last output lines lineLog keeps for errors.
const keptLines = 8

// lineLog is an io.Writer that logs each complete line written to it, at
// the level HAProxy's prefix gives ([ALERT], [WARNING]), and keeps the last
// few lines. Once stopping is done, HAProxy was asked to stop: what it
// says then (a worker "exited with code 143 (Terminated)" is an [ALERT])
// is the stop going as asked, and is logged at info level at most.
type lineLog struct {
	log      *slog.Logger
	stopping context.Context
	mu       sync.Mutex
	buf      []byte
	tail     []string
}

func newLineLog(log *slog.Logger, stopping context.Context) *lineLog {
	return &lineLog{log: log, stopping: stopping}
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimSpace(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
		if line != "" {
			l.emit(line)
		}
	}
}

func (l *lineLog) emit(line string) {
	level := levelOf(line)
	if l.stopping.Err() != nil {
		level = min(level, slog.LevelInfo)
	}
	l.log.Log(context.Background(), level, line)
	l.tail = append(l.tail, line)
	if len(l.tail) > keptLines {
		l.tail = l.tail[1:]
	}
}

// last returns the kept lines joined, for error messages.
func (l *lineLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tail) == 0 {
		return "(none)"
	}
	return strings.Join(l.tail, " | ")
}

func levelOf(line string) slog.Level {
	switch {
	case strings.HasPrefix(line, "[ALERT]"):
		return slog.LevelError
	case strings.HasPrefix(line, "[WARNING]"):
		return slog.LevelWarn
	}
	return slog.LevelInfo
}
