//! Observe: read every Secret the config names, once, and parse what was read.
//!
//! [`observe`] is the one read of a run's step and of `certgen check`: one LIST or a GET per
//! Secret through the store, any error other than "not found" stopping there, before a key is
//! generated. [`parse`] is the one parser of a stored Secret's data, which the planner and
//! `check` both judge. A [`Snapshot`] carries what its Secrets parse to, parsed at the first
//! ask and kept with it ([`Snapshot::ca_parsed`], [`Snapshot::leaf_parsed`]), so that `check`,
//! Events, the metrics and the exporter read one parse of what one read saw. This module must
//! not decide anything (that is [`crate::plan`] and [`crate::check`]) nor know which store it
//! reads.

#[cfg(test)]
pub(crate) mod fixtures;
pub mod parse;
pub mod writers;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::config::Config;
use crate::secret::{Layout, Observed, StoredSecret};
use crate::store::{SecretStore, StoreError};

/// Everything one observation read: the CA Secret and every other managed Secret, by name,
/// and what their data parse to (kept once parsed).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub ca: Option<Observed>,
    pub secrets: BTreeMap<String, Observed>,
    /// The parses of the Secrets so far (see [`Snapshot::leaf_parsed`]): opaque, empty in a
    /// snapshot built by hand (`..Snapshot::default()`).
    pub parsed: Parsed,
}

/// A parse kept with the data and layout it was made from: it is used only while both still
/// match, so an entry replaced or edited after the parse (as tests and the exporter's watch
/// do) is parsed again, never judged by its old contents.
struct Kept<T> {
    layout: Layout,
    data: BTreeMap<String, Vec<u8>>,
    parsed: Arc<T>,
}

impl<T> Clone for Kept<T> {
    fn clone(&self) -> Self {
        Self {
            layout: self.layout.clone(),
            data: self.data.clone(),
            parsed: Arc::clone(&self.parsed),
        }
    }
}

/// The parses a [`Snapshot`] keeps: the CA Secret's, and every other Secret's by name.
#[derive(Default)]
pub struct Parsed {
    ca: Mutex<Option<Kept<parse::CaData>>>,
    leaves: Mutex<BTreeMap<String, Option<Kept<parse::LeafData>>>>,
}

impl Clone for Parsed {
    fn clone(&self) -> Self {
        Self {
            ca: Mutex::new(self.ca.lock().unwrap_or_else(|e| e.into_inner()).clone()),
            leaves: Mutex::new(
                self.leaves
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
            ),
        }
    }
}

impl std::fmt::Debug for Parsed {
    /// Never the parses: they hold keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parsed { .. }")
    }
}

/// `kept`'s parse when it was made from `s` under `layout`, else `parse`'s, kept in its place.
fn kept<T>(
    kept: &mut Option<Kept<T>>,
    s: &StoredSecret,
    layout: &Layout,
    parse: impl FnOnce(&StoredSecret, &Layout) -> T,
) -> Arc<T> {
    match kept {
        Some(k) if k.layout == *layout && k.data == s.data => Arc::clone(&k.parsed),
        _ => {
            let parsed = Arc::new(parse(s, layout));
            *kept = Some(Kept {
                layout: layout.clone(),
                data: s.data.clone(),
                parsed: Arc::clone(&parsed),
            });
            parsed
        }
    }
}

impl Snapshot {
    /// The CA Secret's data as parsed under `layout` ([`parse::ca`]), parsed once; `None`
    /// when it is not stored (or was not read).
    pub fn ca_parsed(&self, layout: &Layout) -> Option<Arc<parse::CaData>> {
        let s = self.ca().present()?;
        let mut ca = self.parsed.ca.lock().unwrap_or_else(|e| e.into_inner());
        Some(kept(&mut ca, s, layout, parse::ca))
    }

    /// The Secret `name`'s data (not the CA Secret's) as parsed under `layout`
    /// ([`parse::leaf_in`]), parsed once; `None` when it is not stored (or was not read).
    pub fn leaf_parsed(&self, name: &str, layout: &Layout) -> Option<Arc<parse::LeafData>> {
        let s = self.get(name).present()?;
        let mut leaves = self.parsed.leaves.lock().unwrap_or_else(|e| e.into_inner());
        let slot = leaves.entry(name.to_string()).or_default();
        Some(kept(slot, s, layout, parse::leaf_in))
    }

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::observe::parse::Field;

    const NOW: time::OffsetDateTime = time::macros::datetime!(2026-06-01 12:00 UTC);

    #[test]
    fn a_snapshot_parses_each_secret_once_and_again_only_when_it_changed() {
        let config = crate::config::test_profile(None);
        let ca = crate::pki::issue_ca(&config.ca.spec, NOW).unwrap();
        let mut observed = super::fixtures::installed(&config, &ca, NOW);
        let t = &config.tls[0];
        let first = observed.leaf_parsed(&t.name, &t.layout).unwrap();
        assert!(matches!(first.cert, Field::Ok(_)));
        // The second ask, and a clone's, read the same parse.
        assert!(Arc::ptr_eq(
            &first,
            &observed.leaf_parsed(&t.name, &t.layout).unwrap()
        ));
        let copy = observed.clone();
        assert!(Arc::ptr_eq(
            &first,
            &copy.leaf_parsed(&t.name, &t.layout).unwrap()
        ));
        let ca_first = observed.ca_parsed(&config.ca.layout).unwrap();
        assert!(Arc::ptr_eq(
            &ca_first,
            &observed.ca_parsed(&config.ca.layout).unwrap()
        ));
        // Under another layout, the data is parsed under that one.
        let other = crate::secret::Layout {
            cert: "cert".into(),
            ..t.layout.clone()
        };
        assert!(
            observed
                .leaf_parsed(&t.name, &other)
                .unwrap()
                .cert
                .missing()
        );
        // An edited Secret is judged by what it holds now, never by its old parse.
        observed.edit(&t.name, |s| {
            s.data.insert("tls.crt".into(), b"garbage".to_vec());
        });
        let edited = observed.leaf_parsed(&t.name, &t.layout).unwrap();
        assert!(matches!(edited.cert, Field::Bad(_)));
        observed.edit(&config.ca.secret_name, |s| {
            s.data.remove("tls.crt");
        });
        assert!(
            observed
                .ca_parsed(&config.ca.layout)
                .unwrap()
                .cert
                .missing()
        );
        // A Secret gone is no longer parsed.
        observed.secrets.remove(&t.name);
        assert!(observed.leaf_parsed(&t.name, &t.layout).is_none());
    }
}
