//! Observe: read every Secret the config names, once, and parse what was read.
//!
//! [`observe`] is the one read of a run's step and of `certgen check`: one LIST or a GET per
//! Secret through the store, any error other than "not found" stopping there, before a key is
//! generated. [`parse`] is the one parser of a stored Secret's data, which the planner and
//! `check` both judge. This module must not decide anything (that is [`crate::plan`] and
//! [`crate::check`]) nor know which store it reads.

#[cfg(test)]
pub(crate) mod fixtures;
pub mod parse;
pub mod writers;

use std::collections::BTreeMap;

use crate::config::Config;
use crate::secret::Observed;
use crate::store::{SecretStore, StoreError};

/// Everything one observation read: the CA Secret and every other managed Secret, by name.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub ca: Option<Observed>,
    pub secrets: BTreeMap<String, Observed>,
}

impl Snapshot {
    /// Whether none of the Secrets is stored: a fresh install.
    pub fn nothing_stored(&self) -> bool {
        let absent = |o: &Observed| matches!(o, Observed::Absent);
        self.ca.as_ref().is_none_or(absent) && self.secrets.values().all(absent)
    }

    /// The Secret `name` (not the CA Secret) as read; absent when it was not read.
    pub fn get(&self, name: &str) -> &Observed {
        self.secrets.get(name).unwrap_or(&Observed::Absent)
    }

    /// The CA Secret as read; absent when it was not read.
    pub fn ca(&self) -> &Observed {
        self.ca.as_ref().unwrap_or(&Observed::Absent)
    }

    /// The Secret `name` as read, the CA Secret included (its name is `ca_name`).
    pub fn named(&self, name: &str, ca_name: &str) -> Option<&Observed> {
        if name == ca_name {
            self.ca.as_ref()
        } else {
            self.secrets.get(name)
        }
    }

    /// A digest of which version of every Secret was read: two plans with the same digest saw
    /// the same stored state.
    pub fn digest(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        let mut add = |name: &str, o: Option<&Observed>| {
            h.update((name.len() as u64).to_be_bytes());
            h.update(name.as_bytes());
            match o.and_then(Observed::present) {
                None => h.update([0]),
                Some(s) => {
                    h.update([1]);
                    h.update((s.version.len() as u64).to_be_bytes());
                    h.update(s.version.as_bytes());
                }
            }
        };
        add("", self.ca.as_ref());
        for (name, o) in &self.secrets {
            add(name, Some(o));
        }
        h.finalize().into()
    }
}

/// Reads every Secret the config names. Any error other than "not found" stops the run here,
/// before a key is generated.
pub async fn observe<S: SecretStore>(store: &S, config: &Config) -> Result<Snapshot, StoreError> {
    let names: Vec<&String> = std::iter::once(&config.ca.secret_name)
        .chain(config.tls.iter().map(|t| &t.name))
        .chain(config.hmac.iter().map(|h| &h.name))
        .collect();
    // One LIST when the store can and may, else by name with bounded concurrency.
    let keys: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
    let reads = store.get_many(&keys).await?;
    let mut snapshot = Snapshot::default();
    for (name, observed) in names.into_iter().zip(reads) {
        if *name == config.ca.secret_name {
            snapshot.ca = Some(observed);
        } else {
            snapshot.secrets.insert(name.clone(), observed);
        }
    }
    Ok(snapshot)
}

/// For `certgen check`: [`observe`], except that a Secret that exists but cannot be read
/// (local mode: a file over the size bound, a link, another user's file) does not hide the
/// others. It is left out of the snapshot and returned with its error, so `check` reports it
/// and judges the rest; a run stops on it. Any other error (the API server's) stops here as in
/// [`observe`].
pub async fn observe_each<S: SecretStore>(
    store: &S,
    config: &Config,
) -> Result<(Snapshot, Vec<(String, StoreError)>), StoreError> {
    match observe(store, config).await {
        Err(StoreError::Local { .. }) => {}
        other => return other.map(|s| (s, Vec::new())),
    }
    let mut snapshot = Snapshot::default();
    let mut unreadable = Vec::new();
    for name in config.secret_names() {
        let observed = match store.get(name).await {
            Ok(o) => o,
            Err(e @ StoreError::Local { .. }) => {
                unreadable.push((name.to_string(), e));
                continue;
            }
            Err(e) => return Err(e),
        };
        if name == config.ca.secret_name {
            snapshot.ca = Some(observed);
        } else {
            snapshot.secrets.insert(name.to_string(), observed);
        }
    }
    Ok((snapshot, unreadable))
}
