//! Another writer in the simulated world: between runs, or while one waits at a gate, it
//! replaces any subset of the Secrets with what other tools and people write.
//!
//! - Envoy Gateway's own `certgen --overwrite` (cluster: a blind `update` of each TLS Secret;
//!   locally it writes through certgen's links, which the real-binary tests cover): a CA of
//!   its own, leaves signed by it, `ca.crt` = that CA; certgen's CA Secret untouched.
//! - A backup restored (Velero, a GitOps revert): the chosen Secrets as they were before an
//!   earlier run, or deleted when they did not exist then.
//! - Another tool's fresh CA with leaves, certgen's CA Secret included (key and all).
//! - A deleted Secret.
//! - A hand-edited `ca.crt`: its first CA dropped, or a stray CA put in second place.
//!
//! Each write lands at the store's time, like any write. The oracle (`check_pairs`) checks every
//! pair of versions that may be held from then on, the foreign ones included; a failure that
//! goes back to the other writer's own one-step replacement is counted, not charged to certgen
//! ([`super::foreign_root`]), and the state the runs settle in must have none.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certgen::config::Config;
use certgen::pki::{CaSpec, KeyAlgorithm, issue_ca, issue_leaf};
use certgen::secret::StoredSecret;

use super::{CA, TLS, World};

/// Which Secrets a foreign write touches: bits 0-2 the TLS Secrets (`TLS`), bit 3 the CA
/// Secret.
pub type Which = u8;

pub const ALL_TLS: Which = 0b0111;

/// One write by another tool (see the module's documentation).
#[derive(Clone, Copy, Debug)]
pub enum Foreign {
    EnvoyGateway {
        which: Which,
    },
    /// As the Secrets were before the `runs_back`-th most recent run (1: the last one).
    Restore {
        which: Which,
        runs_back: usize,
    },
    FreshCa {
        which: Which,
    },
    Delete {
        which: Which,
    },
    HandEdit {
        secret: usize,
        append: bool,
    },
}

fn names(which: Which) -> impl Iterator<Item = &'static str> {
    TLS.iter()
        .copied()
        .chain(std::iter::once(CA))
        .enumerate()
        .filter(move |(i, _)| which & (1 << i) != 0)
        .map(|(_, n)| n)
}

fn tls_secret(name: &str, data: BTreeMap<String, Vec<u8>>) -> StoredSecret {
    StoredSecret {
        name: name.into(),
        type_: "kubernetes.io/tls".into(),
        data,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        owners: vec![],
        version: String::new(),
        written_at: None,
        divergent: vec![],
        certificate: None,
    }
}

impl Foreign {
    /// Whether it replaces or deletes certgen's CA Secret.
    pub fn touches_ca(&self) -> bool {
        match *self {
            Self::Restore { which, .. } | Self::FreshCa { which } | Self::Delete { which } => {
                which & 0b1000 != 0
            }
            Self::EnvoyGateway { .. } | Self::HandEdit { .. } => false,
        }
    }

    /// Makes this write in `world`, now.
    pub fn write(&self, world: &Arc<Mutex<World>>, config: &Config) {
        let mut w = world.lock().unwrap();
        let now = w.store_now();
        match *self {
            Self::EnvoyGateway { which } | Self::FreshCa { which } => {
                let spec = CaSpec {
                    common_name: "envoy-gateway".into(),
                    validity: Duration::from_secs(5 * 365 * 86_400),
                    key_algorithm: KeyAlgorithm::EcdsaP256,
                };
                let (ca, _) = issue_ca(&spec, now).unwrap();
                let ca_pem = ca.cert.pem().into_bytes();
                let fresh = matches!(self, Self::FreshCa { .. });
                for name in names(which) {
                    let data = if name == CA {
                        if !fresh {
                            continue; // Envoy Gateway's certgen leaves certgen's CA Secret alone
                        }
                        BTreeMap::from([
                            ("ca.crt".to_string(), ca_pem.clone()),
                            ("tls.crt".to_string(), ca_pem.clone()),
                            (
                                "tls.key".to_string(),
                                ca.key_pem().expose().as_bytes().to_vec(),
                            ),
                        ])
                    } else {
                        let t = config.tls.iter().find(|t| t.name == name).unwrap();
                        let issued = issue_leaf(&t.leaf, &ca, now).unwrap();
                        BTreeMap::from([
                            ("ca.crt".to_string(), ca_pem.clone()),
                            ("tls.crt".to_string(), issued.cert.pem().into_bytes()),
                            (
                                "tls.key".to_string(),
                                issued.key.expose().as_bytes().to_vec(),
                            ),
                        ])
                    };
                    w.replace(tls_secret(name, data));
                }
            }
            Self::Restore { which, runs_back } => {
                let marks = w.run_marks.len();
                let cut = if runs_back == 0 || runs_back > marks {
                    0
                } else {
                    w.run_marks[marks - runs_back]
                };
                for name in names(which) {
                    let then = w.history[..cut]
                        .iter()
                        .rev()
                        .find(|(n, _)| n == name)
                        .and_then(|(_, s)| s.clone());
                    match then {
                        Some(s) => {
                            if w.get(name).map(|c| &c.data) != Some(&s.data) {
                                w.replace(s);
                            }
                        }
                        None => w.delete(name),
                    }
                }
            }
            Self::Delete { which } => {
                for name in names(which) {
                    w.delete(name);
                }
            }
            Self::HandEdit { secret, append } => {
                let name = TLS[secret % TLS.len()];
                let Some(mut s) = w.get(name).cloned() else {
                    return;
                };
                let Some(bundle) = s.data.get("ca.crt") else {
                    return;
                };
                let mut certs = certgen::pki::parse_cert_chain(bundle).unwrap_or_default();
                if append {
                    let spec = CaSpec {
                        common_name: "stray".into(),
                        validity: Duration::from_secs(365 * 86_400),
                        key_algorithm: KeyAlgorithm::EcdsaP256,
                    };
                    // A bundle of more than two CAs is refused as unusable (exit 2, by design):
                    // the hand-edit keeps to two.
                    certs.truncate(1);
                    certs.push(issue_ca(&spec, now).unwrap().0.cert);
                } else if certs.len() > 1 {
                    certs.remove(0);
                } else {
                    return;
                }
                let pem: String = certs.iter().map(|c| c.pem()).collect();
                s.data.insert("ca.crt".into(), pem.into_bytes());
                w.replace(s);
            }
        }
    }
}
