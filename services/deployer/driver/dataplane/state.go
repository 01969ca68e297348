package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/haproxytech/client-native/v6/storage"
)

// state is what the API has when an Apply starts.
type state struct {
	config  []byte
	version int64
	// failedReload is the API's latest reload when it failed.
	failedReload *reloadModel
	// stored are the storage files, by kind and storage name.
	stored map[kind]map[string]storedFile
}

// storedFile is one file in the API's storage.
type storedFile struct {
	// content of a map or general file (certificates are not served back).
	content []byte
	// fingerprint and size of a certificate.
	fingerprint string
	size        int64
}

// reloadModel is the API's reload object.
type reloadModel struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Response string `json:"response"`
}

// storageModel is the part of the API's map, general file and certificate
// objects the driver reads.
type storageModel struct {
	StorageName string `json:"storage_name"`
	File        string `json:"file"`
	Description string `json:"description"`
	Sha256      string `json:"sha256_finger_print"`
	Size        *int64 `json:"size"`
}

var storagePaths = map[kind]string{
	kindMap:     "/services/haproxy/storage/maps",
	kindCert:    "/services/haproxy/storage/ssl_certificates",
	kindGeneral: "/services/haproxy/storage/general",
}

const rawPath = "/services/haproxy/configuration/raw"

// readState reads the configuration with its version, the latest reload,
// and the storage files (with the content of those the bundle has).
func (d *Driver) readState(ctx context.Context, items []item) (*state, error) {
	st := &state{stored: map[kind]map[string]storedFile{}}
	var err error
	if st.config, st.version, err = d.readConfig(ctx); err != nil {
		return nil, err
	}
	var reloads []reloadModel
	if err := d.api.getJSON(ctx, "/services/haproxy/reloads", &reloads); err != nil {
		return nil, err
	}
	if n := len(reloads); n > 0 && reloads[n-1].Status == "failed" {
		st.failedReload = &reloads[n-1]
	}
	want := map[string]bool{}
	for _, it := range items {
		want[it.Path] = true
	}
	for _, k := range []kind{kindMap, kindCert, kindGeneral} {
		if st.stored[k], err = d.readStorage(ctx, k, want); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// readConfig returns the raw configuration and its version.
func (d *Driver) readConfig(ctx context.Context) ([]byte, int64, error) {
	resp, err := d.api.do(ctx, request{method: http.MethodGet, path: rawPath, want: []int{http.StatusOK}})
	if err != nil {
		return nil, 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(resp.header.Get("Configuration-Version")), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: GET %s: Configuration-Version %q: %w", ErrAPI, rawPath, resp.header.Get("Configuration-Version"), err)
	}
	return resp.body, v, nil
}

// readStorage lists one storage, with the content (or, for certificates,
// the fingerprint) of the files the bundle has.
func (d *Driver) readStorage(ctx context.Context, k kind, want map[string]bool) (map[string]storedFile, error) {
	var list []storageModel
	if err := d.api.getJSON(ctx, storagePaths[k], &list); err != nil {
		return nil, err
	}
	out := make(map[string]storedFile, len(list))
	for _, m := range list {
		name := m.StorageName
		if name == "" || strings.Contains(name, "/") {
			continue // not a flat storage name: not the driver's
		}
		if !want[d.bundlePath(k, name)] {
			out[name] = storedFile{}
			continue
		}
		f, err := d.readStored(ctx, k, name)
		if err != nil {
			return nil, err
		}
		out[name] = f
	}
	return out, nil
}

func (d *Driver) readStored(ctx context.Context, k kind, name string) (storedFile, error) {
	p := storagePaths[k] + "/" + escape(name)
	if k == kindCert {
		var m storageModel
		if err := d.api.getJSON(ctx, p, &m); err != nil {
			return storedFile{}, err
		}
		f := storedFile{fingerprint: m.Sha256, size: -1}
		if m.Size != nil {
			f.size = *m.Size
		}
		return f, nil
	}
	resp, err := d.api.do(ctx, request{method: http.MethodGet, path: p, want: []int{http.StatusOK}})
	if err != nil {
		return storedFile{}, err
	}
	return storedFile{content: resp.body}, nil
}

// sameStored reports whether the stored file holds the item's content. A
// certificate is the same when its size and the SHA-256 fingerprint of its
// leaf certificate (as the API computes it) are.
func sameStored(it item, f storedFile) bool {
	if it.kind != kindCert {
		return bytes.Equal(it.Content, f.content)
	}
	if f.size != int64(len(it.Content)) || f.fingerprint == "" {
		return false
	}
	info, err := storage.ParseCertificatesInfo(it.Content)
	return err == nil && info.Sha256FingerPrint == f.fingerprint
}
