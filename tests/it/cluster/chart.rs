//! The Helm chart and plain manifests: rendered, applied with real RBAC, and run against.
