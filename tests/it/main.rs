//! certgen's integration tests, one binary. Where each behaviour is tested (a file in `cluster/`
//! checks the same behaviour as the top-level file of the same name, on the real control plane
//! that `tests/testenv/up` starts; `cargo test -- --skip cluster::` runs everything else):
//!
//! | behaviour                              | no cluster         | real control plane            |
//! |----------------------------------------|--------------------|-------------------------------|
//! | what certgen issues (webpki verifies)  | `pki_verify`       |                               |
//! | the local store, `check` on files      | `local`            |                               |
//! | the Kubernetes store, races, RBAC, LIST|                    | `cluster::store`              |
//! | refused input, `--force` repairs       | `bad_input`        | `cluster::bad_input`          |
//! | rotation: staging, kills, concurrency  | `rotation`, `sim`  | `cluster::rotation`           |
//! | rotation with real TLS peers           |                    | `cluster::harness`, `cluster::real_node` |
//! | consumers: restarts, rollout waits     |                    | `cluster::consumers`          |
//! | probes                                 | `probe`            | `cluster::probe`              |
//! | API faults (fake server / TCP proxy)   | `faults`           | `cluster::faults`             |
//! | Envoy Gateway compatibility            | `eg_compat`        | `cluster::eg_compat`          |
//! | topology injector's caBundle           |                    | `cluster::webhook`            |
//! | Helm chart and plain manifests         |                    | `cluster::chart`              |
//! | the test control plane itself          |                    | `cluster::smoke`              |
//! | no key material in output, no TLS skip | `hygiene`          |                               |
//! | docs, completions, man page up to date | `docs`             |                               |
//! | inputs the fuzzers found               | `fuzz_regressions` |                               |
//!
//! `sim` is the trajectory simulation: certgen's driver, planner and apply step in-process on a
//! virtual clock, checked by an independent oracle. Shared helpers: `util` (the binary, files,
//! trust checks, TLS servers, Envoy Gateway's own output); the cluster fixture, with every
//! cluster helper, is `cluster/mod.rs`.

mod bad_input;
mod cluster;
mod docs;
mod eg_compat;
mod faults;
mod fuzz_regressions;
mod hygiene;
mod local;
mod pki_verify;
mod probe;
mod rotation;
mod sim;
mod snapshots;
mod util;
