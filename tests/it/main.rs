//! certgen's integration tests, one binary. A file in `cluster/` tests the same behaviour as the
//! top-level file of the same name, against the real control plane that `tests/testenv/up`
//! starts; `cargo test -- --skip cluster::` runs everything else. Where each behaviour is tested:
//!
//! - what certgen issues, checked by rustls-webpki: `pki_verify`
//! - the local store, and `check` on a directory: `local`
//! - the Kubernetes store (create, renew, races, RBAC, one LIST): `cluster::store`
//! - refused input, and what `--force` repairs: `bad_input`, `cluster::bad_input`
//! - local mode's power-cut promises, on the system calls of real runs (strace): `durability`
//! - local mode against a hostile directory (links, other users' files, modes), bounded
//!   config reads, exit codes after partial writes, JSON errors, unusable inputs: `hostile`
//! - rotation (staging, kills at every write, concurrent runs, the Lease, gates): `rotation`,
//!   `cluster::rotation`; whole trajectories in-process on a virtual clock: `sim`; real TLS
//!   peers handshaking throughout: `cluster::harness`, `cluster::real_node`
//! - consumers (restarts, rollout waits): `cluster::consumers`; StatefulSet and DaemonSet
//!   consumers (each kind's rule, the chart's Role for them, recreation, `OnDelete`):
//!   `cluster::kinds`, and on the real node `cluster::real_node_kinds`
//! - probes: `probe`, `cluster::probe`
//! - API faults: `faults` (an HTTP-level fake for the answers a real server will not give on
//!   demand: 429, 503, 500), `cluster::faults` (a TCP proxy to the real server: resets, slow
//!   answers, dropped watches)
//! - another writer between runs (Envoy Gateway's real certgen `--local`/`--overwrite`, a
//!   restored backup, a write during a trust gate): `rotation::another_writer`,
//!   `cluster::foreign`, and in the simulation `sim::foreign` with its cases in `sim::cases`
//! - pushed propagation (pod pokes, gates opened on evidence): `cluster::pokes`,
//!   `cluster::real_node`, `cluster::rotation_speed`; real kubelet faults through a run's gates:
//!   `cluster::real_node_faults`, and through the chart's hook: `cluster::real_node_hook`
//! - Envoy Gateway compatibility: `eg_compat`, `cluster::eg_compat`
//! - the built-in profiles for Cilium's Hubble TLS and Contour, against their tools' recorded
//!   runs, and `profile list`: `profiles_compat`, `cluster::profiles_compat`
//! - the topology injector's caBundle: `cluster::webhook`
//! - kube-webhook-certgen compatibility (kube-prometheus-stack's Job pair, refusals, an
//!   APIService) and admission calls during a rotation: `cluster::kwc`, `cluster::kwc_rotation`;
//!   `create` renewing a due Secret with its caBundle in step: `cluster::kwc_renew`; `create`
//!   renewals with `patch` between them in the whole simulated world: `sim::kwc`
//! - beside cert-manager (its real controller and CA injector): a caBundle the injector
//!   manages is never written, the hand-over both ways and kube-webhook-certgen's switch to
//!   cert-manager with peers or an admission webhook called throughout: `cluster::cert_manager`;
//!   the topology injector found by its label: `cluster::webhook`
//! - the Helm chart and the plain manifests: `cluster::chart`
//! - Prometheus metrics (`check --output prometheus`, a run's textfile and Pushgateway push),
//!   checked by `promtool`, and the chart's alerts (`promtool test rules`): `metrics`,
//!   `cluster::metrics`; `certgen exporter` (watches, `/metrics` through a staged rotation, as the
//!   chart's exporter identity): `cluster::exporter`
//! - Kubernetes Events of runs and rotations: `cluster::events`
//! - valid is what a TLS verifier says (a CA Secret restored mid-rotation, clocks an hour off
//!   with real libfaketime, CAs no verifier accepts, each checked by `openssl verify`): `valid`,
//!   `cluster::valid`
//! - the test control plane itself: `cluster::smoke`
//! - one CA across a set of clusters (three control planes, a member's API server stopped, a
//!   member's own run, `check` over the set, cross-cluster handshakes): `cluster::set`
//! - one judgement: `check` exits 0 exactly when a plain run writes and refuses nothing,
//!   over generated stores through the binary: `one_judgement`
//! - reports and `--help` as users read them (insta): `snapshots`
//! - docs, completions and man pages up to date: `docs`; every shell snippet of README.md and
//!   `docs/` run as written (or marked with why not): `doc_snippets`, `cluster::doc_snippets`
//! - no key material in any output, no way to skip TLS verification: `hygiene`
//! - inputs the fuzzers found: `fuzz_regressions`
//! - the module layout of `src/` (no import cycles; the core never reaches `src/k8s`): `layout`
//!
//! Shared helpers: `util` (the binary, files, trust checks, TLS servers, Envoy Gateway's own
//! output); every cluster helper is on the cluster fixture, `cluster/mod.rs`.

mod bad_input;
mod cluster;
mod doc_snippets;
mod docs;
mod durability;
mod eg_compat;
mod faults;
mod fuzz_regressions;
mod hostile;
mod hygiene;
mod kwc;
mod layout;
mod local;
mod metrics;
mod one_judgement;
mod pki_verify;
mod probe;
mod profiles_compat;
mod read_side;
mod rotation;
mod sim;
mod snapshots;
mod util;
mod valid;
