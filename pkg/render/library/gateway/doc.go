// Package gateway holds the tests of the gateway template library (the
// library itself is library.yaml and templates/, embedded and applied by
// package library; README.md documents it). The tests render the fixtures
// under testdata/ and compare them with golden files, check every bundle
// with haproxy -c, and send real requests through HAProxy.
package gateway
