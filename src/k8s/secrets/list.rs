//! Many Secrets in one request: a LIST of the namespace's Secrets instead of one GET per name,
//! when the Role grants `list` on Secrets. RBAC cannot limit `list` to names, so certgen's own
//! Role does not need it and Envoy Gateway's does not grant it: the first LIST refused with 403
//! is remembered for the rest of the process and every later read goes by name, as before.
//!
//! A LIST without a resourceVersion is a consistent (quorum) read, like the GETs it replaces,
//! and each item carries its own resourceVersion, so the writes planned from it are fenced
//! exactly as before. Small sets (the built-in profile's five Secrets) are still read by name:
//! a LIST returns every Secret in the namespace, which costs more than five GETs when the
//! namespace holds other large Secrets (Helm release records, say).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};

use kube::api::ListParams;

use super::{KubeStore, from_secret, is_status};
use crate::secret::Observed;
use crate::store::{StoreError, get_by_name};

/// From how many names on a LIST is tried.
pub const LIST_FROM: usize = 8;

const UNKNOWN: u8 = 0;
const GRANTED: u8 = 1;
const FORBIDDEN: u8 = 2;

/// Whether `list` on Secrets was found granted (once per process).
static LIST: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Reads `names` with one LIST when granted and worth it, else by name.
pub(super) async fn get_many(
    store: &KubeStore,
    names: &[&str],
) -> Result<Vec<Observed>, StoreError> {
    if names.len() < LIST_FROM || LIST.load(Ordering::Relaxed) == FORBIDDEN {
        return get_by_name(store, names).await;
    }
    let list = match store.api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(e) if is_status(&e, 403) => {
            LIST.store(FORBIDDEN, Ordering::Relaxed);
            tracing::info!(
                namespace = %store.namespace,
                "the Role does not grant list on Secrets; reading the {} Secrets one by one (grant list to make this one request)",
                names.len()
            );
            return get_by_name(store, names).await;
        }
        Err(e) => return Err(store.api_error("list", "", e)),
    };
    LIST.store(GRANTED, Ordering::Relaxed);
    let found: BTreeMap<String, _> = list
        .items
        .into_iter()
        .map(|secret| {
            let s = from_secret(secret);
            (s.name.clone(), s)
        })
        .collect();
    let mut read = Vec::with_capacity(names.len());
    for name in names {
        read.push(match found.get(*name) {
            Some(s) => store.with_certificate(Observed::Present(s.clone())).await?,
            None => Observed::Absent,
        });
    }
    Ok(read)
}
