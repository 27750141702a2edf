//go:build tools

// Package tools pins the kwok controller that certgen's test environment builds.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
