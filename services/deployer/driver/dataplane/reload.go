package dataplane

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// waitReload polls the API's reload until it ends, within ReloadTimeout.
func (d *Driver) waitReload(ctx context.Context, id string, res *Result) error {
	if id == "" {
		return fmt.Errorf("%w: the API accepted the configuration without a Reload-ID", ErrAPI)
	}
	deadline := time.Now().Add(d.opts.ReloadTimeout)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("dataplane: wait for reload %s: %w", id, ctx.Err())
		case <-t.C:
		}
		var r reloadModel
		if err := d.api.getJSON(ctx, "/services/haproxy/reloads/"+escape(id), &r); err != nil {
			return err
		}
		switch r.Status {
		case "succeeded":
			return nil
		case "failed":
			msg := strings.TrimSpace(r.Response)
			res.ReloadDetail = strings.TrimSpace(res.ReloadDetail + "\n" + msg)
			return fmt.Errorf("%w: reload %s: %s", ErrReloadFailed, id, msg)
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w: reload %s still %q after %v", ErrReloadTimeout, id, r.Status, d.opts.ReloadTimeout)
		}
		t.Reset(d.opts.PollInterval)
	}
}
