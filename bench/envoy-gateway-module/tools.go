//go:build tools

// Package tools pins Envoy Gateway's own certgen (`envoy-gateway certgen`), which
// bench/envoy-gateway builds and times next to certgen. Nothing here is compiled into certgen.
package tools

import (
	_ "github.com/envoyproxy/gateway/cmd/envoy-gateway"
)
