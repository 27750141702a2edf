//! Many Secrets in one request: a LIST of the namespace's Secrets instead of one GET per name,
//! when the Role grants `list` on Secrets. RBAC cannot limit `list` to names, so certgen's own
//! Role does not need it and Envoy Gateway's does not grant it: the first LIST refused with 403
//! is remembered for the rest of the process and every later read goes by name, as before.
//!
//! A LIST without a resourceVersion is a consistent (quorum) read, like the GETs it replaces,
//! and each item carries its own resourceVersion, so the writes planned from it are fenced
//! exactly as before. It is read in pages of [`PAGE_SIZE`] (the continue token keeps every
//! page at the first one's resourceVersion, so the pages are one consistent read), and only
//! the managed Secrets of each page are kept: a namespace's other Secrets (Helm release
//! records of up to 1 MiB each) cost one page of memory, not the whole namespace. Small sets
//! (the built-in profile's five Secrets) are still read by name: a LIST returns every Secret
//! in the namespace, which costs more than five GETs when the namespace holds other large
//! Secrets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};

use kube::api::ListParams;

use super::{KubeStore, from_secret, is_status};
use crate::secret::Observed;
use crate::store::{StoreError, get_by_name};

/// From how many names on a LIST is tried.
pub const LIST_FROM: usize = 8;

/// Secrets per page of a LIST (of `check`, a run, and the exporter's watch): a Secret holds at
/// most 1 MiB, so a page of unrelated Secrets costs at most this many MiB as read, about
/// three times that while decoded (docs/exporter.md).
pub const PAGE_SIZE: u32 = 20;

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
    let wanted: std::collections::HashSet<&str> = names.iter().copied().collect();
    let mut found: BTreeMap<String, crate::secret::StoredSecret> = BTreeMap::new();
    let mut params = ListParams::default().limit(PAGE_SIZE);
    loop {
        let page = match store.api.list(&params).await {
            Ok(page) => page,
            Err(e) if is_status(&e, 403) && found.is_empty() => {
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
        for secret in page.items {
            if secret
                .metadata
                .name
                .as_deref()
                .is_some_and(|n| wanted.contains(n))
            {
                let s = from_secret(secret);
                found.insert(s.name.clone(), s);
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let mut read = Vec::with_capacity(names.len());
    for name in names {
        read.push(match found.remove(*name) {
            Some(s) => store.with_certificate(Observed::Present(s)).await?,
            None => Observed::Absent,
        });
    }
    Ok(read)
}
