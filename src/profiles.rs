//! The built-in profiles: their names and their YAML, compiled into the binary, plus the same
//! profiles as JSON (made from the YAML by `build.rs`), which is what a run parses.
//!
//! A leaf module, so that both the command line (its defaults) and the configuration (which
//! resolves a profile) can name them without importing each other.

/// Names of the built-in profiles, in the order `profile list` lists them.
pub const NAMES: &[&str] = &["envoy-gateway"];

/// The profile used when neither `--config` nor `--profile` is given.
pub const DEFAULT: &str = "envoy-gateway";

/// The YAML text of a built-in profile.
pub fn builtin(name: &str) -> Option<&'static str> {
    match name {
        "envoy-gateway" => Some(include_str!("../profiles/envoy-gateway.yaml")),
        _ => None,
    }
}

/// A built-in profile as JSON, compiled from its YAML at build time (`build.rs`). A run parses
/// this rather than the YAML: the same configuration (a unit test compares them) at a fraction
/// of the cost.
pub fn builtin_json(name: &str) -> Option<&'static str> {
    match name {
        "envoy-gateway" => Some(include_str!(concat!(
            env!("OUT_DIR"),
            "/envoy-gateway.json"
        ))),
        _ => None,
    }
}
