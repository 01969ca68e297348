package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Apply delivers the bundle; see the package documentation for the
// contract. The bundle is validated before anything is sent (ErrBadPath,
// ErrConfig). A version conflict restarts the delivery from a fresh read, at
// most MaxConflictRetries times.
func (d *Driver) Apply(ctx context.Context, files []File) (Result, error) {
	var res Result
	main, items, err := d.classify(files)
	if err != nil {
		return res, err
	}
	if err := d.lock(ctx); err != nil {
		return res, err
	}
	defer d.unlock()
	for attempt := 0; ; attempt++ {
		res = Result{Conflicts: attempt}
		err = d.applyOnce(ctx, main, items, &res)
		if !errors.Is(err, ErrVersionConflict) {
			break
		}
		if attempt >= d.opts.MaxConflictRetries {
			return res, fmt.Errorf("%w after %d attempts: %w", ErrVersionConflict, attempt+1, err)
		}
	}
	slices.Sort(res.Written)
	slices.Sort(res.Removed)
	return res, err
}

func (d *Driver) applyOnce(ctx context.Context, main []byte, items []item, res *Result) error {
	st, err := d.readState(ctx, items)
	if err != nil {
		return err
	}
	res.Version = st.version
	p := d.plan(st, main, items)
	res.Unchanged = p.unchanged
	if p.empty() && st.failedReload == nil {
		return nil
	}
	dec, err := d.decide(ctx, st, p)
	if err != nil {
		return err
	}
	if dec.reason == "" {
		done, err := d.applyRuntime(ctx, st, p, dec.ops, res)
		if done || err != nil {
			return err
		}
		dec.reason, dec.detail = ReasonRuntimeFailed, res.RuntimeError
	}
	res.ReloadReason, res.ReloadDetail = dec.reason, dec.detail
	return d.applyReload(ctx, st, p, res)
}

// applyRuntime runs the operations, then keeps storage and the stored
// configuration in step without a reload. It returns false without an error
// when the API refused an operation (res.RuntimeError says which): the caller
// then reloads.
func (d *Driver) applyRuntime(ctx context.Context, st *state, p *plan, ops []runtimeOp, res *Result) (bool, error) {
	for _, op := range ops {
		_, err := d.api.do(ctx, op.req)
		var ae *apiError
		if errors.As(err, &ae) {
			res.RuntimeError = op.show + ": " + ae.Error()
			return false, nil
		}
		if err != nil {
			return false, err
		}
		res.RuntimeOps = append(res.RuntimeOps, op.show)
	}
	if err := d.writeStorage(ctx, p, res); err != nil {
		return false, err
	}
	if p.cfgChanged {
		resp, err := d.postConfig(ctx, st.version, p.main, true, res)
		if err != nil {
			return false, err
		}
		res.Written = append(res.Written, d.opts.Main)
		res.Version = versionOf(resp, res.Version)
	}
	return true, d.removeStale(ctx, p, res)
}

// applyReload writes storage without reloading, then posts the
// configuration, which costs the one reload, and waits for it.
func (d *Driver) applyReload(ctx context.Context, st *state, p *plan, res *Result) error {
	if err := d.writeStorage(ctx, p, res); err != nil {
		return err
	}
	resp, err := d.postConfig(ctx, st.version, p.main, false, res)
	if err != nil {
		return err
	}
	if p.cfgChanged {
		res.Written = append(res.Written, d.opts.Main)
	}
	res.Version = versionOf(resp, res.Version)
	if resp.status == http.StatusAccepted {
		res.ReloadID = resp.header.Get("Reload-ID")
		if err := d.waitReload(ctx, res.ReloadID, res); err != nil {
			return err
		}
	}
	res.Reloaded = true
	return d.removeStale(ctx, p, res)
}

// postConfig replaces the stored configuration at the version read. The API
// checks the configuration first (haproxy -c) and answers 400 with
// HAProxy's messages when it fails: ErrRejected.
func (d *Driver) postConfig(ctx context.Context, version int64, cfg []byte, skipReload bool, res *Result) (response, error) {
	q := query("version", strconv.FormatInt(version, 10))
	if skipReload {
		q.Set("skip_reload", "true")
	}
	resp, err := d.api.do(ctx, request{
		method: http.MethodPost, path: rawPath, query: q, body: cfg, contentType: "text/plain",
		want: []int{http.StatusCreated, http.StatusAccepted}, versioned: true,
	})
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusBadRequest {
		res.ReloadDetail = strings.TrimSpace(res.ReloadDetail + "\n" + ae.message)
		return resp, fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return resp, err
}

func versionOf(resp response, def int64) int64 {
	if v, err := strconv.ParseInt(resp.header.Get("Configuration-Version"), 10, 64); err == nil {
		return v
	}
	return def
}

// writeStorage creates the new storage files and replaces the changed ones,
// all without a reload.
func (d *Driver) writeStorage(ctx context.Context, p *plan, res *Result) error {
	for _, it := range p.creates {
		body, ct := multipartFile(it.name, it.Content)
		r := request{method: http.MethodPost, path: storagePaths[it.kind], body: body, contentType: ct, want: []int{http.StatusCreated}}
		if it.kind == kindCert {
			r.query = query("skip_reload", "true")
		}
		if _, err := d.api.do(ctx, r); err != nil {
			return err
		}
		res.Written = append(res.Written, it.Path)
	}
	for _, it := range p.updates {
		if _, err := d.api.do(ctx, replaceRequest(it)); err != nil {
			return err
		}
		res.Written = append(res.Written, it.Path)
	}
	return nil
}

// replaceRequest replaces a storage file's content without a reload. Maps
// and certificates take the content as text, general files as a form.
func replaceRequest(it item) request {
	r := request{
		method: http.MethodPut, path: storagePaths[it.kind] + "/" + escape(it.name),
		query: query("skip_reload", "true"), body: it.Content, contentType: "text/plain",
	}
	switch it.kind {
	case kindMap:
		r.want = []int{http.StatusNoContent}
	case kindCert:
		r.want = []int{http.StatusOK}
	default:
		r.body, r.contentType = multipartFile(it.name, it.Content)
		r.want = []int{http.StatusNoContent}
	}
	return r
}

// removeStale deletes the storage files that left the bundle. HAProxy keeps
// what it loaded in memory, and the configuration no longer names them.
func (d *Driver) removeStale(ctx context.Context, p *plan, res *Result) error {
	var errs []error
	for _, s := range p.stale {
		r := request{method: http.MethodDelete, path: storagePaths[s.kind] + "/" + escape(s.name), want: []int{http.StatusNoContent}}
		if s.kind == kindCert {
			r.query = query("skip_reload", "true")
		}
		_, err := d.api.do(ctx, r)
		var ae *apiError
		switch {
		case err == nil:
			res.Removed = append(res.Removed, d.bundlePath(s.kind, s.name))
		case errors.As(err, &ae) && ae.status == http.StatusNotFound:
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
