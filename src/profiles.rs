//! The built-in profiles: their names and their YAML, compiled into the binary, plus the same
//! profiles as JSON (made from the YAML by `build.rs`), which is what a run parses.
//!
//! A leaf module, so that both the command line (its defaults) and the configuration (which
//! resolves a profile) can name them without importing each other.

/// Names of the built-in profiles, in the order `profile list` lists them.
pub const NAMES: &[&str] = &[
    "envoy-gateway",
    "cilium-hubble",
    "cilium-clustermesh",
    "contour",
];

/// The profile used when neither `--config` nor `--profile` is given.
pub const DEFAULT: &str = "envoy-gateway";

/// One line about a built-in profile: whose Secrets it writes, for `profile list`.
pub fn summary(name: &str) -> Option<&'static str> {
    match name {
        "envoy-gateway" => Some(
            "Envoy Gateway's certgen: envoy-gateway, envoy, envoy-rate-limit, envoy-oidc-hmac (default)",
        ),
        "cilium-hubble" => Some(
            "Cilium's certgen for Hubble TLS: hubble-server-certs, hubble-relay-*-certs, hubble-metrics-server-certs, hubble-ui-client-certs",
        ),
        "cilium-clustermesh" => Some(
            "Cilium ClusterMesh and Hubble, signed by the shared cilium-ca (Cilium's layout); run over every cluster of the mesh (needs {cluster} names)",
        ),
        "contour" => Some("Contour's `contour certgen` (compact format): contourcert, envoycert"),
        _ => None,
    }
}

/// The YAML text of a built-in profile.
pub fn builtin(name: &str) -> Option<&'static str> {
    match name {
        "envoy-gateway" => Some(include_str!("../profiles/envoy-gateway.yaml")),
        "cilium-hubble" => Some(include_str!("../profiles/cilium-hubble.yaml")),
        "cilium-clustermesh" => Some(include_str!("../profiles/cilium-clustermesh.yaml")),
        "contour" => Some(include_str!("../profiles/contour.yaml")),
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
        "cilium-hubble" => Some(include_str!(concat!(
            env!("OUT_DIR"),
            "/cilium-hubble.json"
        ))),
        "cilium-clustermesh" => Some(include_str!(concat!(
            env!("OUT_DIR"),
            "/cilium-clustermesh.json"
        ))),
        "contour" => Some(include_str!(concat!(env!("OUT_DIR"), "/contour.json"))),
        _ => None,
    }
}

/// `profile list`: one line per built-in profile, its name and what it writes.
pub fn listing() -> String {
    let width = NAMES.iter().map(|n| n.len()).max().unwrap_or(0);
    NAMES
        .iter()
        .map(|n| format!("{n:width$}  {}\n", summary(n).unwrap_or("")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_profile_has_yaml_json_and_a_summary() {
        for name in NAMES {
            assert!(builtin(name).is_some(), "{name}: no YAML");
            assert!(builtin_json(name).is_some(), "{name}: no JSON");
            assert!(summary(name).is_some(), "{name}: no summary");
        }
        let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles"))
            .unwrap()
            .filter_map(|e| {
                let p = e.unwrap().path();
                (p.extension()? == "yaml").then(|| p.file_stem()?.to_str().map(String::from))?
            })
            .count();
        assert_eq!(
            files,
            NAMES.len(),
            "a profiles/*.yaml file is not listed in NAMES"
        );
    }
}
