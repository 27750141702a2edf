//! Stored Secrets for the unit tests of what judges them (the planner, `check`): a Secret with
//! some data, certgen's whole installation at a given time, and edits of it. Test code only.

use std::collections::BTreeMap;

use time::OffsetDateTime;

use super::Snapshot;
use crate::config::Config;
use crate::pki::{CaKey, Cert, Issued, bundle_pem, issue_leaf};
use crate::secret::{Observed, StoredSecret, TYPE_OPAQUE, TYPE_TLS};

/// A Secret holding `data`, at version "1".
pub fn secret(name: &str, type_: &str, data: &[(&str, Vec<u8>)]) -> Observed {
    Observed::Present(StoredSecret {
        name: name.into(),
        type_: type_.into(),
        data: data
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        owners: vec![],
        version: "1".into(),
        written_at: None,
        divergent: vec![],
        certificate: None,
        writes: Vec::new(),
    })
}

/// A TLS Secret holding `leaf` and the bundle `bundle` (PEM).
pub fn tls(name: &str, bundle: &[u8], leaf: &Issued) -> Observed {
    secret(
        name,
        TYPE_TLS,
        &[
            ("ca.crt", bundle.to_vec()),
            ("tls.crt", leaf.cert.pem().into_bytes()),
            ("tls.key", leaf.key.expose().as_bytes().to_vec()),
        ],
    )
}

/// What certgen leaves after a run at `at` with the CA `ca`: the CA Secret, every leaf issued
/// then by `ca`, every bundle `[ca]`, and the HMAC Secrets.
pub fn installed(config: &Config, ca: &(CaKey, Issued), at: OffsetDateTime) -> Snapshot {
    let bundle = bundle_pem(std::slice::from_ref(&ca.0.cert)).into_bytes();
    let mut snapshot = Snapshot {
        ca: Some(secret(
            &config.ca.secret_name,
            TYPE_TLS,
            &[
                ("ca.crt", bundle.clone()),
                ("tls.crt", ca.1.cert.pem().into_bytes()),
                ("tls.key", ca.1.key.expose().as_bytes().to_vec()),
            ],
        )),
        secrets: BTreeMap::new(),
        ..Snapshot::default()
    };
    for t in &config.tls {
        let leaf = issue_leaf(&t.leaf, &ca.0, at).unwrap();
        snapshot
            .secrets
            .insert(t.name.clone(), tls(&t.name, &bundle, &leaf));
    }
    for h in &config.hmac {
        snapshot.secrets.insert(
            h.name.clone(),
            secret(&h.name, TYPE_OPAQUE, &[(&h.key, vec![7; 32])]),
        );
    }
    snapshot
}

impl Snapshot {
    /// Edits the stored Secret `name` (the CA Secret's too).
    pub fn edit(&mut self, name: &str, f: impl FnOnce(&mut StoredSecret)) {
        let slot = match self.secrets.get_mut(name) {
            Some(slot) => slot,
            None => self.ca.as_mut().expect("a CA Secret was read"),
        };
        let Observed::Present(s) = slot else {
            panic!("{name} is absent")
        };
        assert_eq!(s.name, name);
        f(s);
    }

    /// Makes `certs` the bundle of the CA Secret and of every TLS Secret.
    pub fn set_bundles(&mut self, certs: &[Cert]) {
        let pem = bundle_pem(certs).into_bytes();
        let names: Vec<String> = self
            .ca
            .iter()
            .chain(self.secrets.values())
            .filter_map(Observed::present)
            .filter(|s| s.type_ == TYPE_TLS)
            .map(|s| s.name.clone())
            .collect();
        for name in names {
            self.edit(&name, |s| {
                s.data.insert("ca.crt".into(), pem.clone());
            });
        }
    }
}
