package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

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
	// cert is what the API tells of a stored certificate.
	cert *storageModel
}

// reloadModel is the API's reload object.
type reloadModel struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Response  string `json:"response"`
	Timestamp int64  `json:"reload_timestamp"`
}

// storageModel is the part of the API's map, general file and certificate
// objects the driver reads. For a certificate the API reports what
// client-native's storage.ParseCertificatesInfo finds in the stored file
// (serial, validity, subject, issuers, names), and its size; it does not
// report a fingerprint.
type storageModel struct {
	StorageName string `json:"storage_name"`
	File        string `json:"file"`
	Description string `json:"description"`
	Size        *int64 `json:"size"`
	Serial      string `json:"serial"`
	NotBefore   string `json:"not_before"`
	NotAfter    string `json:"not_after"`
	Subject     string `json:"subject"`
	Issuers     string `json:"issuers"`
	Domains     string `json:"domains"`
	IPAddresses string `json:"ip_addresses"`
	Sha256      string `json:"sha256_finger_print"`
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
	if r := latestReload(reloads); r != nil && r.Status == "failed" {
		st.failedReload = r
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
		return storedFile{cert: &m}, nil
	}
	resp, err := d.api.do(ctx, request{method: http.MethodGet, path: p, want: []int{http.StatusOK}})
	if err != nil {
		return storedFile{}, err
	}
	return storedFile{content: resp.body}, nil
}

// sameStored reports whether the stored file holds the item's content. The
// API does not serve a stored certificate back, so a certificate is the same
// when its size and what the API reports of it (serial, validity, subject,
// issuers, names, and the SHA-256 fingerprint where one is reported) match
// the bundle's: a certificate is named by its issuer and serial, and the key
// beside it must be the key of that certificate.
func sameStored(it item, f storedFile) bool {
	if it.kind != kindCert {
		return bytes.Equal(it.Content, f.content)
	}
	m := f.cert
	if m == nil || m.Size == nil || *m.Size != int64(len(it.Content)) || m.Serial == "" {
		return false
	}
	info, err := storage.ParseCertificatesInfo(it.Content)
	if err != nil {
		return false
	}
	return m.Serial == info.Serial && m.Subject == info.Subject && m.Issuers == info.Issuers &&
		m.Domains == info.DNS && m.IPAddresses == info.IPs &&
		sameTime(m.NotBefore, info.NotBefore) && sameTime(m.NotAfter, info.NotAfter) &&
		(m.Sha256 == "" || m.Sha256 == info.Sha256FingerPrint)
}

// sameTime compares a date the API reports with one of the certificate.
func sameTime(reported string, t *time.Time) bool {
	if t == nil {
		return reported == ""
	}
	r, err := time.Parse(time.RFC3339Nano, reported)
	return err == nil && r.Equal(t.Truncate(time.Second))
}

// latestReload is the newest of the API's reloads. The list is not in
// order (failed reloads come first, in no particular order, then the last
// one that succeeded, then those in progress); a reload's id ends with a
// number that grows with every reload, so the newest has the largest.
func latestReload(list []reloadModel) *reloadModel {
	var latest *reloadModel
	best := int64(-1)
	for i := range list {
		n := reloadIndex(list[i].ID)
		if n > best || (n == best && latest != nil && list[i].Timestamp > latest.Timestamp) {
			latest, best = &list[i], n
		}
	}
	return latest
}

// reloadIndex is the number at the end of a reload id ("2026-01-02-7"), or
// -1.
func reloadIndex(id string) int64 {
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if i < 0 || err != nil || n < 0 {
		return -1
	}
	return n
}
