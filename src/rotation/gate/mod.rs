//! The propagation gate, all in one place: a state machine fed with what the driver observed,
//! and the driver that reads the world for it.
//!
//! - `evidence.rs` is the machine: [`Evidence`] keeps what this run has written, pushed and
//!   seen, privately. It is fed one observation at a time as a plain value (a step's writes, a
//!   poke's answer, a kubelet Lease read, a round of per-pod probes, the pods' report lines, a
//!   `caBundle` write and whether the API server's cache showed it), and answers, when asked,
//!   which pods it still waits for and why ([`Evidence::verdict`]), which pods are due a poke
//!   and which kubelets to watch. It reads nothing and sends nothing.
//! - `push.rs` is the driver ([`Push`]): it lists the pods, pokes them, reads their kubelets'
//!   Leases through the seam ([`crate::outside::PodsApi`]), hands each answer to the machine,
//!   and waits until the machine opens the gate.
//! - `injector.rs` looks, at the trust gate, at the `caBundle` targets cert-manager's CA
//!   injector writes: whether each holds the pending CA and the API server's cache shows it.
//! - `probes.rs` dials the per-pod probes a gate may open on and hands their results over.
//! - `pace.rs` is the budget every one of those requests goes through.
//!
//! Arrows run down only: `push` and `probes` feed `evidence`; nothing here imports this file or
//! the rotation driver above it.

mod evidence;
mod injector;
mod pace;
mod probes;
mod push;

pub use self::evidence::{Evidence, POKE_SETTLE, WATCHES_BACK, Waited};
pub use self::injector::Injector;
pub use self::pace::{IN_FLIGHT, PER_SECOND, Pacer};
#[cfg(feature = "test-hooks")]
pub use self::pace::{IN_FLIGHT_ENV, PER_SECOND_ENV};
#[cfg(feature = "test-hooks")]
pub use self::push::PAUSE_BEFORE_POKES_ENV;
pub use self::push::{CLEANUP_WAIT, Push, wait_timer};
