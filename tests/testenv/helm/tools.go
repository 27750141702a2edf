//go:build tools

// Package tools pins the helm command that certgen's chart tests render the
// chart with (tests/testenv/build-helm). Nothing here is compiled into certgen.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
