// Package soak is weft's soak harness (tests only): `weft up` with the
// files driver on 10,000 objects (Ingresses of the ingress library, their
// Services and EndpointSlices) in 100 manifest files, under 100 endpoint
// changes a second for 10 minutes (make soak). Its flags' defaults are
// the short form `make test` runs: 3,000 objects in 30 files for 10
// seconds (-objects, -files, -duration). It reports the data folder's size,
// the process's goroutines, Go heap and resident memory over time, the
// latency of probe changes until they are in the deployed haproxy.cfg,
// and fails unless the deployed files end up byte for byte what `weft
// render` makes of the final manifests and weft logged no error.
package soak
