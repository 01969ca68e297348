package runtime

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrNoView: the driver has no admin socket, so HAProxy's own view of its
// proxies and servers cannot be read.
var ErrNoView = errors.New("runtime: no admin socket: HAProxy's statistics cannot be read")

// Stat is one line of "show stat": a frontend, a backend or a server.
type Stat struct {
	// Proxy is the frontend or backend name; Name is "FRONTEND",
	// "BACKEND" or the server's name.
	Proxy, Name string
	// Type is "frontend", "backend", "server" or "listener".
	Type string
	// Status is HAProxy's status column ("UP", "DOWN", "OPEN", "no
	// check", "MAINT", "UP 1/3", ...).
	Status string
	// Responses are the HTTP responses sent (every hrsp_* counter) and
	// Err5xx those among them that were 5xx, since the worker started.
	Responses, Err5xx uint64
}

var statTypes = map[string]string{"0": "frontend", "1": "backend", "2": "server", "3": "listener"}

// Stats reads "show stat" on the admin socket: HAProxy's own view of its
// frontends, backends and servers.
func (d *Driver) Stats(ctx context.Context) ([]Stat, error) {
	if d.opts.AdminSocket == "" {
		return nil, ErrNoView
	}
	out, err := d.admin.do(ctx, "show stat")
	if err != nil {
		return nil, fmt.Errorf("show stat on %s: %w", d.opts.AdminSocket, err)
	}
	return parseStat(out)
}

// parseStat reads the CSV of "show stat", whose first line ("# pxname,
// svname,...") names the columns.
func parseStat(out string) ([]Stat, error) {
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(out, "# ")))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("show stat: no header: %w (answer %q)", err, trimAnswer(out))
	}
	col := map[string]int{}
	for i, name := range header {
		col[name] = i
	}
	for _, need := range []string{"pxname", "svname", "status", "type", "hrsp_5xx"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("show stat: no column %q (answer %q)", need, trimAnswer(out))
		}
	}
	field := func(rec []string, name string) string {
		if i, ok := col[name]; ok && i < len(rec) {
			return rec[i]
		}
		return ""
	}
	count := func(rec []string, name string) uint64 {
		n, _ := strconv.ParseUint(field(rec, name), 10, 64)
		return n
	}
	var stats []Stat
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return stats, nil
		}
		if err != nil {
			return nil, fmt.Errorf("show stat: %w", err)
		}
		if len(rec) < 2 || rec[0] == "" {
			continue
		}
		s := Stat{Proxy: rec[col["pxname"]], Name: rec[col["svname"]], Type: statTypes[field(rec, "type")], Status: field(rec, "status"), Err5xx: count(rec, "hrsp_5xx")}
		for _, c := range []string{"hrsp_1xx", "hrsp_2xx", "hrsp_3xx", "hrsp_4xx", "hrsp_5xx", "hrsp_other"} {
			s.Responses += count(rec, c)
		}
		stats = append(stats, s)
	}
}
