//! `certgen exporter`'s rooms: the state its watches keep ([`state`]) and the HTTP server of
//! `/metrics` ([`http`]); the job that wires them to the cluster is [`crate::run::exporter`].
//! It serves the metrics of `certgen check --output prometheus` from watches instead of reads.
//!
//! One LIST+WATCH per resource kind ([`crate::k8s::watch`]: the namespace's Secrets, and each
//! kind of `caBundle` target the config names) keeps a [`state::State`] current; each scrape
//! computes the families from it at the scrape's time ([`state::State::families`]), so a scrape
//! costs no API request and time-dependent values are never stale. A scrape reuses the previous
//! one's health metrics while the state is unchanged and no certificate time boundary has been
//! crossed (they are a step function of time with steps there), so an idle exporter's scrapes
//! cost a rendering, not a `check` of every Secret. SIGTERM or SIGINT stops it:
//! the listener closes, scrapes in flight finish (up to 5 s), the watches are dropped, exit 0.
//!
//! It never writes anything to the cluster.

pub mod http;
pub mod state;
