//! certgen's integration tests, one binary: PKI checked by verifiers we did not write, the
//! binary end to end in local mode, docs that must not go stale, and (with `KUBECONFIG` set by
//! `tests/testenv/up`) the Kubernetes store against a real control plane.

mod api_faults;
mod bad_input;
mod cluster;
mod docs;
mod eg_flags;
mod fuzz_regressions;
mod hygiene;
mod layout;
mod local;
mod pki_verify;
mod probe;
mod rotation;
mod sim;
mod snapshots;
mod util;
