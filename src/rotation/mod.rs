//! The rotation driver: one invocation of certgen's main job, start to end.
//!
//! A read-only look first ([`step::look`]); the run lock when anything is to be written; then
//! the steps of a renewal or rotation ([`step::step`]: trust, gate, leaves, gate, cleanup),
//! each followed by its `caBundle` targets (`webhooks.rs`), its ClusterTrustBundles
//! (`trust_bundles.rs`) and the consumers' restarts, waits
//! and probes (`consumers.rs`), with the gates waited out in between (`wait.rs`, and the gate's
//! machine and its driver in `gate/`); finally the report (`end.rs`; [`crate::report`]
//! assembles it). It decides only the order of steps and how long to wait: what each step
//! writes is the plan's ([`crate::plan`]).
//!
//! This file only declares the rooms, hands their names on, and wires the set's driver
//! (`set.rs`) to the steps (`driver.rs`). Arrows run down only: no file below imports this one
//! or a sibling that imports it back; what they share lives in a leaf (`invocation.rs`,
//! `progress.rs`, `step.rs`).

mod consumers;
mod driver;
mod end;
mod gate;
mod invocation;
mod progress;
pub mod set;
mod step;
pub mod trust_bundles;
mod wait;
mod webhooks;

pub use self::driver::{MAX_STEPS, run};
#[cfg(feature = "test-hooks")]
pub use self::gate::PAUSE_BEFORE_POKES_ENV;
pub use self::gate::{CLEANUP_WAIT, IN_FLIGHT, PER_SECOND, POKE_SETTLE, WATCHES_BACK, wait_timer};
#[cfg(feature = "test-hooks")]
pub use self::gate::{IN_FLIGHT_ENV, PER_SECOND_ENV};
pub use self::invocation::Invocation;
pub use self::progress::{Learned, Progress};
#[cfg(feature = "test-hooks")]
pub use self::step::resumed_rotation_keeps_overwrite;
pub use self::step::{MAX_ATTEMPTS, Outcome, dry_look, look, step};

/// The set's driver (`set.rs`) as a member's steps see it (`driver.rs`): wired here, above
/// both, so that neither imports the other back.
impl driver::SetMember for set::Member<'_> {
    fn hold(&self) -> crate::plan::Hold {
        set::Member::hold(self)
    }

    fn in_set(&self) -> step::InSet<'_> {
        set::Member::in_set(self)
    }

    fn stepped(&self) {
        set::Member::stepped(self)
    }

    fn at_rest(&self, outcome: &Outcome) {
        set::Member::at_rest(self, outcome)
    }

    fn arrive<'a>(
        &'a self,
        barrier: crate::plan::Barrier,
        phase: &'a crate::plan::Phase,
    ) -> futures::future::BoxFuture<'a, driver::Arrival> {
        Box::pin(async move {
            match set::Member::arrive(self, barrier, phase).await {
                set::Arrival::Go => driver::Arrival::Go,
                set::Arrival::Stop { note, error } => driver::Arrival::Stop { note, error },
            }
        })
    }

    fn done(&self, cleanup_pending: bool) {
        set::Member::done(self, cleanup_pending)
    }
}
