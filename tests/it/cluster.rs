//! The Kubernetes store against a real control plane (`tests/testenv/up`).
