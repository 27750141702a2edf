//! Smoke test of the test control plane itself.
