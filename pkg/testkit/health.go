package testkit

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"time"
)

// Healthy is nil when a GET of url through client answers 200 OK within 2
// seconds, else what it answered or why it did not.
func Healthy(client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// Tail returns the last n lines of the file at path (or why it could not
// be read).
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return LastLines(string(data), n)
}

// LastLines returns the last n lines of s, without its final newline.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
