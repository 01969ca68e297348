package haproxycheck

import (
	"bufio"
	"bytes"
	"regexp"
	"strconv"
	"strings"
)

var (
	// `[ALERT]    (1234) : config : ...`, haproxy's own messages.
	tagRe = regexp.MustCompile(`^\[([A-Z]+)\]\s*\(\d+\)\s*:\s?(.*)$`)
	// `[alert] 324/103959 (1234) : ...`, log lines (e.g. from Lua's core.Alert).
	logRe = regexp.MustCompile(`^\[([a-z]+)\]\s+\S+\s+\(\d+\)\s*:\s?(.*)$`)
	// The context haproxy prefixes while it reads the configuration.
	ctxRe = regexp.MustCompile(`^config\s*:\s*`)
	// `parsing [file:12] : msg`, `Parsing [file:12]: msg` and `[file:12] : msg`.
	locRe = regexp.MustCompile(`^(?:[Pp]arsing\s*)?\[(.+?):(\d+)\]\s*:?\s*(.*)$`)
	// Closing summaries that add nothing once a real alert is known.
	summaryRe = regexp.MustCompile(`^(?:Error\(s\) found in configuration file : .*|Fatal errors found in configuration\.)$`)
)

// banners are success lines haproxy prints on stdout.
var banners = map[string]bool{
	"Configuration file is valid": true,
	"Warnings were found.":        true,
}

// tagSeverity maps a message tag to a Problem severity; "" drops the line.
func tagSeverity(tag string) string {
	switch strings.ToLower(tag) {
	case "alert", "emerg", "crit", "err", "error":
		return SeverityAlert
	case "warning", "warn":
		return SeverityWarning
	}
	return ""
}

// parseOutput turns haproxy -c output into problems. failed tells whether
// haproxy exited non-zero; it sets the severity of untagged lines. aliases are
// the temp dir's spellings, mapped back to bundle-relative paths.
func parseOutput(out []byte, failed bool, aliases []string) []Problem {
	var problems []Problem
	// last is the index of the problem a continuation line extends; -1 when
	// there is none, -2 when the preceding message was dropped.
	last := -1
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), maxOutput+1)
	for sc.Scan() {
		raw := strings.TrimRight(sc.Text(), " \t\r")
		if strings.TrimSpace(raw) == "" {
			continue
		}
		line := mapTemp(raw, aliases)

		if raw[0] == ' ' || raw[0] == '\t' {
			text := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "|"))
			switch {
			case last >= 0:
				if text != "" {
					problems[last].Message += " " + text
				}
				continue
			case last == -2:
				continue
			}
			line = strings.TrimSpace(line)
		}

		var sev, msg string
		if m := tagRe.FindStringSubmatch(line); m != nil {
			sev, msg = tagSeverity(m[1]), m[2]
		} else if m := logRe.FindStringSubmatch(line); m != nil {
			sev, msg = tagSeverity(m[1]), m[2]
		} else {
			if banners[line] {
				last = -2
				continue
			}
			problems = append(problems, Problem{Severity: severityFor(failed), Message: line})
			last = len(problems) - 1
			continue
		}
		if sev == "" {
			last = -2
			continue
		}
		problems = append(problems, locate(sev, ctxRe.ReplaceAllString(msg, "")))
		last = len(problems) - 1
	}
	return dropSummaries(problems)
}

// locate splits a leading file:line location off msg.
func locate(sev, msg string) Problem {
	p := Problem{Severity: sev, Message: strings.TrimSpace(msg)}
	if m := locRe.FindStringSubmatch(p.Message); m != nil {
		if n, err := strconv.Atoi(m[2]); err == nil {
			p.File, p.Line, p.Message = m[1], n, m[3]
		}
	}
	return p
}

// dropSummaries removes haproxy's closing summaries when another alert exists.
func dropSummaries(problems []Problem) []Problem {
	isSummary := func(p Problem) bool {
		return p.Severity == SeverityAlert && p.File == "" && summaryRe.MatchString(p.Message)
	}
	real := 0
	for _, p := range problems {
		if p.Severity == SeverityAlert && !isSummary(p) {
			real++
		}
	}
	if real == 0 {
		return problems
	}
	kept := problems[:0]
	for _, p := range problems {
		if !isSummary(p) {
			kept = append(kept, p)
		}
	}
	return kept
}

// mapTemp rewrites temp dir paths in s to bundle-relative ones.
func mapTemp(s string, aliases []string) string {
	for _, a := range aliases {
		if a == "" || !strings.Contains(s, a) {
			continue
		}
		s = strings.ReplaceAll(s, a+"/", "")
		s = strings.ReplaceAll(s, a, ".")
	}
	return s
}
