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
//! - A restore of any subset of the Secrets (the CA Secret alone included) to their state at
//!   any point of the history so far: mid-rotation, at a trust gate, between two steps.
//! - A CA no verifier accepts (one constraint of each kind) planted in the CA Secret.
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
    /// The chosen Secrets as they were at any point of the history so far (`at` modulo the
    /// number of writes, 0: before the first): a backup taken mid-rotation restored, or a
    /// GitOps revert to a commit made then; the CA Secret alone included.
    RestoreAt {
        which: Which,
        at: usize,
    },
    /// A CA no TLS verifier accepts for the profile's leaves (`kind`: see
    /// [`constrained_ca`]) planted in the CA Secret with its key.
    PlantCa {
        kind: usize,
    },
}

/// The constraints a planted CA carries, one per kind: an unknown critical extension, name
/// constraints excluding the namespace, permitting only another domain, no keyCertSign, and
/// an extendedKeyUsage of clientAuth only.
pub const CONSTRAINTS: [&str; 5] = [
    "critical",
    "excluded",
    "permitted",
    "no-cert-sign",
    "client-only",
];

/// A self-signed CA of constraint `kind` (see [`CONSTRAINTS`]) issued at `at`: its PEM and its
/// key's PEM.
pub fn constrained_ca(kind: &str, at: time::OffsetDateTime) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = crate::util::constrained_ca_params(kind);
    params.not_before = at - time::Duration::minutes(5);
    params.not_after = at + time::Duration::days(3650);
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, key.serialize_pem())
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
        writes: Vec::new(),
    }
}

impl Foreign {
    /// Whether it replaces or deletes certgen's CA Secret.
    pub fn touches_ca(&self) -> bool {
        match *self {
            Self::Restore { which, .. }
            | Self::RestoreAt { which, .. }
            | Self::FreshCa { which }
            | Self::Delete { which } => which & 0b1000 != 0,
            Self::PlantCa { .. } => true,
            Self::EnvoyGateway { .. } | Self::HandEdit { .. } => false,
        }
    }

    /// Makes this write in `world`, now.
    pub fn write(&self, world: &Arc<Mutex<World>>, config: &Config) {
        let mut w = world.lock().unwrap();
        // Another tool issues on its own clock, which consumers share, not on the store's (a
        // CA made on a clock an hour ahead of the consumers is not valid for them, and real
        // verifiers check a CA's own validity: nothing certgen signs with it can repair that).
        let now = w.true_now();
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
            Self::RestoreAt { which, at } => {
                let cut = at % (w.history.len() + 1);
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
            Self::PlantCa { kind } => {
                let (pem, key) = constrained_ca(CONSTRAINTS[kind % CONSTRAINTS.len()], now);
                let data = BTreeMap::from([
                    ("ca.crt".to_string(), pem.clone().into_bytes()),
                    ("tls.crt".to_string(), pem.into_bytes()),
                    ("tls.key".to_string(), key.into_bytes()),
                ]);
                w.replace(tls_secret(CA, data));
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
