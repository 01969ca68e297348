//go:build tools

// Package natsserver pins the nats-server command build.sh compiles; nothing
// imports it.
package natsserver

import (
	_ "github.com/nats-io/nats-server/v2"
)
