//go:build tools

// Package consul pins the consul command build.sh compiles; nothing
// imports it.
package consul

import (
	_ "github.com/hashicorp/consul"
)
