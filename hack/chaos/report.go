package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// Result is the record of a run.
type Result struct {
	Options Options
	Start   time.Time
	Objects int // in the end

	InitialConverged bool
	InitialTime      time.Duration // from the services' start
	InitialMismatch  string

	EditsDone    int
	Converged    bool
	Mismatch     string        // the last difference, when not converged
	ConvergeTime time.Duration // from the last edit

	ServiceKills, NodeKills, NodeLosses int
	Procs                               []procStats

	DLQTotal int
	DLQ      map[string]int // "<service>: <reason>" (numbers as N) -> count
	DLQError string         // when the stream could not be read

	Errors map[string]*logGroup // "<process kind>: <msg>" -> lines
	Dir    string               // the run folder, when kept

	// Failover: from the kill of the render lease holder (or of the
	// deployer carrying out an order) to the edit deployed, per round;
	// rounds that did not deploy within Settle (or found no holder) are
	// FailoverMissed. Takeover, for deployers: from the kill to another
	// replica holding the instance's deploy lease.
	// Heartbeats: what the leases bucket lacked (or held beyond the
	// running validators) at the end; empty when they matched.
	Heartbeats string
	// Races: the processes (one entry per race report) whose log has a
	// race detector's report; binaries built with -race only.
	Races []string

	Failover       []time.Duration
	Takeover       []time.Duration
	FailoverMissed int
}

type logGroup struct {
	Count   int
	Example string // the err attribute of the first line
}

var numbers = regexp.MustCompile(`[0-9]+`)

// normalize makes reasons and messages that differ only in numbers (sequence
// numbers, revisions, durations) group together.
func normalize(s string) string {
	s = numbers.ReplaceAllString(s, "N")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// collectDLQ reads every message of WEFT_DLQ and groups them by reason.
func (r *run) collectDLQ() {
	err := func() error {
		nc, err := nats.Connect(r.nats.URL())
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := js.Stream(ctx, msg.StreamDLQ)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs == 0 {
			return nil
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("message %d: %w", seq, err)
			}
			r.res.DLQTotal++
			var dl msg.DeadLetter
			key := "undecodable dead letter"
			if err := msg.Decode(m.Data, &dl); err == nil {
				key = dl.Service + ": " + normalize(dl.Reason)
			}
			r.res.DLQ[key]++
		}
		return nil
	}()
	if err != nil {
		r.res.DLQError = err.Error()
		r.logf("reading %s: %v", msg.StreamDLQ, err)
	}
}

// dumpResources writes every entry of the resources bucket (key, revision,
// time, operation, value), as the bucket's stream leader has it, to
// resources.txt in the run folder, to tell a write the watcher lost from a
// read the renderer got wrong; and to resources-direct.txt every key whose
// direct get through one node alone (served by any replica) answers another
// revision or nothing: a replica behind its leader.
func (r *run) dumpResources() {
	if err := r.dumpBucket(); err != nil {
		r.logf("dump %s: %v", msg.BucketResources, err)
	}
}

func (r *run) dumpBucket() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kvs := make([]jetstream.KeyValue, 0, r.nats.Size())
	for _, url := range append([]string{r.nats.URL()}, r.nats.URLs()...) {
		nc, err := nats.Connect(url)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		kv, err := js.KeyValue(ctx, msg.BucketResources)
		if err != nil {
			return err
		}
		kvs = append(kvs, kv)
	}
	w, err := kvs[0].WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	var all, direct strings.Builder
	revs := map[string]uint64{}
	deleted := map[string]bool{}
	var keys []string
	for e := range w.Updates() {
		if e == nil {
			break // every current entry seen
		}
		revs[e.Key()] = e.Revision()
		deleted[e.Key()] = e.Operation() != jetstream.KeyValuePut
		keys = append(keys, e.Key())
		fmt.Fprintf(&all, "%s rev %d %s %s %s\n", e.Key(), e.Revision(), e.Created().UTC().Format("15:04:05.000"), e.Operation(), e.Value())
	}
	sort.Strings(keys)
	for i, kv := range kvs[1:] {
		for _, k := range keys {
			e, err := kv.Get(ctx, k)
			switch {
			case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
				fmt.Fprintf(&direct, "%s %s: %v\n", r.nats.Name(i), k, err)
			case err != nil:
				if !deleted[k] {
					fmt.Fprintf(&direct, "%s %s: not found (leader: rev %d)\n", r.nats.Name(i), k, revs[k])
				}
			case e.Revision() != revs[k]:
				fmt.Fprintf(&direct, "%s %s: rev %d (leader: rev %d)\n", r.nats.Name(i), k, e.Revision(), revs[k])
			}
		}
	}
	if err := os.WriteFile(filepath.Join(r.dir, "resources.txt"), []byte(all.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.dir, "resources-direct.txt"), []byte(direct.String()), 0o644)
}

// collectLogs groups the ERROR lines of every service log by process kind
// and message, and keeps the lines a process wrote when it exited.
func (r *run) collectLogs() {
	for _, p := range r.procs {
		kind, _, _ := strings.Cut(p.name, "-")
		f, err := os.Open(p.log)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if bytes.Contains(line, []byte(testkit.RaceReport)) {
				r.res.Races = append(r.res.Races, p.name)
			}
			var rec struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
				Err   any    `json:"err"`
			}
			if json.Unmarshal(line, &rec) != nil {
				// A program's last words (weft-x: error) are not JSON.
				if s := string(line); strings.HasPrefix(s, "weft-") || strings.HasPrefix(s, "panic:") {
					r.addError(kind, "exit: "+normalize(s), "")
				}
				continue
			}
			if rec.Level == "ERROR" {
				r.addError(kind, rec.Msg, fmt.Sprint(rec.Err))
			}
		}
		_ = f.Close()
	}
}

func (r *run) addError(kind, m, example string) {
	key := kind + ": " + m
	g := r.res.Errors[key]
	if g == nil {
		g = &logGroup{Example: example}
		r.res.Errors[key] = g
	}
	g.Count++
}

// Summary is the record for a person.
func (res *Result) Summary() string {
	var b strings.Builder
	o := res.Options
	fmt.Fprintf(&b, "chaos run: mode %s, seed %d, %d objects at the end, %d edits over %v, %d service kills, %d node kills, %d nodes lost\n",
		o.Mode, o.Seed, res.Objects, res.EditsDone, o.Duration, res.ServiceKills, res.NodeKills, res.NodeLosses)
	fmt.Fprintf(&b, "initial deploy: converged=%v in %v\n", res.InitialConverged, res.InitialTime.Round(time.Millisecond))
	if !res.InitialConverged {
		fmt.Fprintf(&b, "  difference: %s\n", res.InitialMismatch)
	}
	fmt.Fprintf(&b, "after the last edit: converged=%v in %v\n", res.Converged, res.ConvergeTime.Round(time.Millisecond))
	if !res.Converged {
		fmt.Fprintf(&b, "  difference: %s\n", res.Mismatch)
	}
	if len(res.Failover)+res.FailoverMissed > 0 {
		if o.FailoverOf == "deployer" {
			fmt.Fprintf(&b, "deployer killed during an order -> another replica carries it out: %v; -> edit deployed (its 1s check included): %v (missed %d)\n", roundAll(res.Takeover), roundAll(res.Failover), res.FailoverMissed)
		} else {
			fmt.Fprintf(&b, "render lease holder killed -> edit deployed: %v (missed %d)\n", roundAll(res.Failover), res.FailoverMissed)
		}
	}
	if len(res.Races) > 0 {
		fmt.Fprintf(&b, "data races reported by: %s\n", strings.Join(res.Races, ", "))
	}
	if res.Heartbeats != "" {
		fmt.Fprintf(&b, "validator heartbeats: %s\n", res.Heartbeats)
	} else {
		b.WriteString("validator heartbeats: one per kind for every running validator\n")
	}
	fmt.Fprintf(&b, "dead letters: %d\n", res.DLQTotal)
	for _, k := range sortedByCount(res.DLQ) {
		fmt.Fprintf(&b, "  %4d  %s\n", res.DLQ[k], k)
	}
	if res.DLQError != "" {
		fmt.Fprintf(&b, "  (could not read them all: %s)\n", res.DLQError)
	}
	counts := map[string]int{}
	for k, g := range res.Errors {
		counts[k] = g.Count
	}
	fmt.Fprintf(&b, "ERROR log lines: %d\n", res.errorLines())
	for _, k := range sortedByCount(counts) {
		fmt.Fprintf(&b, "  %4d  %s", counts[k], k)
		if ex := res.Errors[k].Example; ex != "" && ex != "<nil>" {
			fmt.Fprintf(&b, " (e.g. %s)", normalize(ex))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "processes (killed / exited by themselves):\n")
	for _, p := range res.Procs {
		fmt.Fprintf(&b, "  %-12s %d / %d", p.Name, p.Kills, p.Crashes)
		exits := map[string]int{}
		for _, e := range p.Exits {
			exits[e]++
		}
		for _, e := range sortedByCount(exits) {
			fmt.Fprintf(&b, "  %dx %s", exits[e], e)
		}
		b.WriteString("\n")
	}
	if res.Dir != "" {
		fmt.Fprintf(&b, "logs kept in %s\n", res.Dir)
	}
	return b.String()
}

func (res *Result) errorLines() int {
	var n int
	for _, g := range res.Errors {
		n += g.Count
	}
	return n
}

func (res *Result) crashes() int {
	var n int
	for _, p := range res.Procs {
		n += p.Crashes
	}
	return n
}

// TableHeader is the header of the results table Row writes to.
const TableHeader = "| date (UTC) | mode | seed | objects | edits / s | service kills | node kills / lost | initial | converged | last edit -> converged | dead letters | ERROR lines | exits by themselves |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"

// Row is the run as a row of the results table.
func (res *Result) Row() string {
	o := res.Options
	conv := "no"
	took := "-"
	if res.Converged {
		conv = "yes"
		took = res.ConvergeTime.Round(100 * time.Millisecond).String()
	}
	initial := "no"
	if res.InitialConverged {
		initial = res.InitialTime.Round(100 * time.Millisecond).String()
	}
	return fmt.Sprintf("| %s | %s | %d | %d | %d / %v | %d | %d / %d | %s | %s | %s | %d | %d | %d |\n",
		res.Start.Format("2006-01-02 15:04"), o.Mode, o.Seed, res.Objects, res.EditsDone, o.Duration,
		res.ServiceKills, res.NodeKills, res.NodeLosses, initial, conv, took, res.DLQTotal, res.errorLines(), res.crashes())
}

// AppendRow appends the run's row to the markdown file path, with the
// table's header when the file is new.
func (res *Result) AppendRow(path string) error {
	_, err := os.Stat(path)
	isNew := errors.Is(err, os.ErrNotExist)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if isNew {
		_, _ = f.WriteString(TableHeader)
	}
	_, err = f.WriteString(res.Row())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func sortedByCount(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}
