//go:build tools

// Package tools pins the etcd server that certgen's test environment builds.
package tools

import _ "go.etcd.io/etcd/server/v3"
