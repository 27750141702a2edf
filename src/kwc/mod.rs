//! `certgen create` and `certgen patch`: a drop-in for kube-webhook-certgen (the maintained
//! fork jkroepke/kube-webhook-certgen and the retired ingress-nginx copy), for charts whose
//! admission-webhook Jobs run `create` before install and `patch` after it.
//!
//! The same flags, the same Secret (type `--secret-type`, default `Opaque`; keys `--ca-name`,
//! `--cert-name`, `--key-name`, default `ca`, `cert`, `key`; SANs from `--host`, DNS names and
//! IP addresses; a CA and a serving certificate valid 100 years, ECDSA P-256) and the same
//! objects patched (every entry's `caBundle` of the ValidatingWebhookConfiguration and
//! MutatingWebhookConfiguration `--webhook-name`, optionally their `failurePolicy`; an
//! APIService's `spec.caBundle` with `insecureSkipTLSVerify: false`).
//!
//! What differs, on purpose: every flag is validated before the first request, and bad input
//! (a missing `--host`, an unknown webhook, a Secret holding keys `create` did not write, a
//! failure policy other than Ignore or Fail) exits 2 naming the flag or object, with nothing
//! written; `patch` reads every object before writing any, refuses a CA that does not sign
//! the Secret's serving certificate, writes only what differs (a re-run writes nothing), and
//! fences each update by resourceVersion. `--patch-failure-policy Ignore` is honoured (both
//! copies of kube-webhook-certgen silently drop it: their `switch` has an empty `case
//! "Ignore":`).
//!
//! Layers as in the rest of certgen: the command line converts clap's arguments into plain
//! flags (`src/cli/resolve.rs`), [`request`] turns them into validated
//! requests (no IO), [`plan`] decides from what was read (pure); `crate::run::kwc` reads,
//! plans, prints and writes: the Secret through the Kubernetes adapter (`crate::k8s::kwc`),
//! which this module never imports, the targets through the `caBundle` seam
//! ([`crate::outside::CaBundleTargets`]), as the driver does.

pub mod plan;
pub mod request;

pub use plan::{
    CreatePlan, NewSecret, ObservedSecret, ObservedTarget, PatchPlan, SecretToCreate, TargetWrite,
    plan_create, plan_patch,
};
pub use request::{
    CreateFlags, CreateRequest, FailurePolicy, Keys, PatchFlags, PatchMode, PatchRequest, Target,
};

/// The validity of the CA and the serving certificate `create` issues: 100 years, as
/// kube-webhook-certgen's, so a chart that runs `create` only on install and upgrade is never
/// left with an expired certificate.
pub const VALIDITY: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);
