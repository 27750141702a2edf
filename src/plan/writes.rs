//! What a planned step writes, byte by byte: every data key of every Secret written and what it
//! holds, which keys are private, the labels, the annotation and the precondition.
//!
//! The planner decides what happens to each Secret (its [`Action`]); this turns each decision
//! into its [`Write`]. `apply` only fills in what cannot exist before it runs (the new CA's key,
//! issued leaves, random bytes) and writes: it decides nothing. Pure, like the rest of the plan.

use std::collections::BTreeMap;

use super::{Action, CaRef, Signer};
use crate::config::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::pki::{CaKey, Cert, LeafSpec};
use crate::secret::{Expect, Layout, StoredSecret, TYPE_OPAQUE, TYPE_TLS};

/// The annotation holding the SHA-256 of the CA that signed (or is) a Secret's certificate.
pub const CA_ANNOTATION: &str = "certgen.dev/ca-sha256";

/// What one data key of a write holds.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // a handful per plan; boxing buys nothing
pub enum Content {
    /// These CAs' certificates, in order, as one PEM document (a `ca.crt`).
    Bundle(Vec<CaRef>),
    /// A CA's certificate, PEM.
    Cert(CaRef),
    /// A CA's private key, PEM.
    Key(Signer),
    /// The certificate of the leaf this write issues ([`Write::issue`]), PEM.
    LeafCert,
    /// That leaf's private key, PEM.
    LeafKey,
    /// This many random bytes.
    Random(usize),
    /// Nothing: the empty `tls.key` of another tool's CA, kept without its key.
    Empty,
}

/// A leaf a write issues.
#[derive(Debug, Clone)]
pub struct Issue {
    pub spec: LeafSpec,
    pub signer: Signer,
}

/// One write of one Secret, as decided by the plan.
#[derive(Debug, Clone)]
pub struct Write {
    /// The Secret's type (a new Secret is created with it).
    pub type_: &'static str,
    /// The data keys written; keys not listed are kept.
    pub data: BTreeMap<String, Content>,
    /// The data keys holding private material (written 0600 locally).
    pub secret_keys: Vec<String>,
    /// The data keys deleted.
    pub remove: Vec<String>,
    pub labels: BTreeMap<String, String>,
    /// The CA named by the [`CA_ANNOTATION`] annotation, when the write sets it.
    pub ca_annotation: Option<CaRef>,
    /// Other annotations the write sets (the record of undos, [`crate::observe::writers::HISTORY`]).
    pub annotations: BTreeMap<String, String>,
    /// The precondition: the version the Secret was planned from.
    pub expect: Expect,
    /// The leaf this write issues, for [`Content::LeafCert`] and [`Content::LeafKey`].
    pub issue: Option<Issue>,
}

impl Write {
    /// A write of `data` over what was read at `version` (`None`: create).
    fn new(type_: &'static str, version: &Option<String>, data: Vec<(&str, Content)>) -> Self {
        let data: BTreeMap<String, Content> =
            data.into_iter().map(|(k, c)| (k.to_string(), c)).collect();
        let secret_keys = data
            .iter()
            .filter(|(_, c)| matches!(c, Content::Key(_) | Content::LeafKey | Content::Random(_)))
            .map(|(k, _)| k.clone())
            .collect();
        Self {
            type_,
            data,
            secret_keys,
            remove: Vec::new(),
            labels: BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())]),
            ca_annotation: None,
            annotations: BTreeMap::new(),
            expect: match version {
                None => Expect::Absent,
                Some(v) => Expect::Version(v.clone()),
            },
            issue: None,
        }
    }

    /// Whether this write leaves the data as it is (a relink).
    pub fn relinks(&self) -> bool {
        self.data.is_empty() && self.remove.is_empty()
    }
}

/// The CAs of the CA Secret that a CA write involves.
pub(super) struct CaKeys<'a> {
    pub active: Option<&'a CaKey>,
    pub adopted: Option<&'a Cert>,
    pub pending: Option<&'a CaKey>,
    /// The active and pending CAs were derived from the held Secrets (`plan/held.rs`): the
    /// write records them, whatever the CA Secret held.
    pub relayout: bool,
}

/// The write of the CA Secret (of `layout`) for `action` (read at `version`), with `bundle` as
/// its trust bundle and `remove` deleted; `None` when the action writes nothing.
pub(super) fn ca(
    action: Action,
    version: &Option<String>,
    bundle: &[CaRef],
    remove: &[String],
    cas: CaKeys<'_>,
    layout: &Layout,
) -> Option<Write> {
    let active = |cert: CaRef, key: Signer| -> [(&str, Content); 2] {
        [
            (layout.cert.as_str(), Content::Cert(cert)),
            (layout.key.as_str(), Content::Key(key)),
        ]
    };
    // Another tool's CA, kept as the active trust without its key.
    let adopted_keys = |cert: &Cert| -> [(&str, Content); 2] {
        [
            (
                layout.cert.as_str(),
                Content::Cert(CaRef::Cert(cert.clone())),
            ),
            (layout.key.as_str(), Content::Empty),
        ]
    };
    let (mut data, annotation) = match action {
        Action::Keep | Action::Repair | Action::Delete => return None,
        Action::Create | Action::Rotate => {
            (active(CaRef::New, Signer::New).to_vec(), Some(CaRef::New))
        }
        Action::Trust => {
            let mut data = vec![
                ("next.crt", Content::Cert(CaRef::New)),
                ("next.key", Content::Key(Signer::New)),
            ];
            if let Some(adopted) = cas.adopted {
                data.extend(adopted_keys(adopted));
            } else if let Some(held) = cas.active.filter(|_| cas.relayout) {
                let cert = CaRef::Cert(held.cert.clone());
                data.extend(active(cert, Signer::Held(held.clone())));
            }
            (data, None)
        }
        Action::Promote => {
            let pending = cas
                .pending
                .expect("a promotion has the pending CA it promotes");
            let cert = CaRef::Cert(pending.cert.clone());
            (
                active(cert.clone(), Signer::Held(pending.clone())).to_vec(),
                Some(cert),
            )
        }
        Action::UpdateBundle | Action::Renew if cas.relayout => {
            let mut data = Vec::new();
            if let Some(adopted) = cas.adopted {
                data.extend(adopted_keys(adopted));
            } else if let Some(held) = cas.active {
                let cert = CaRef::Cert(held.cert.clone());
                data.extend(active(cert, Signer::Held(held.clone())));
            }
            if let Some(pending) = cas.pending {
                data.push(("next.crt", Content::Cert(CaRef::Cert(pending.cert.clone()))));
                data.push(("next.key", Content::Key(Signer::Held(pending.clone()))));
            }
            (data, None)
        }
        Action::UpdateBundle | Action::Renew => (Vec::new(), None),
    };
    data.push((layout.bundle.as_str(), Content::Bundle(bundle.to_vec())));
    let mut write = Write::new(layout.type_, version, data);
    // The keys of the active and the pending CA are private, and so is an adopted CA's empty
    // key: by the layout, not by how a name ends.
    write.secret_keys = write
        .data
        .keys()
        .filter(|k| *k == &layout.key || *k == "next.key")
        .cloned()
        .collect();
    write.remove = remove.to_vec();
    write.ca_annotation = annotation;
    Some(write)
}

/// The write of a TLS Secret (read at `version`, of `layout`) that takes `bundle` as its
/// `ca.crt` and, when `issue` is given, a new leaf.
pub(super) fn tls(
    version: &Option<String>,
    bundle: &[CaRef],
    issue: Option<Issue>,
    layout: &Layout,
) -> Write {
    let ca_crt = (layout.bundle.as_str(), Content::Bundle(bundle.to_vec()));
    let Some(issue) = issue else {
        return Write::new(layout.type_, version, vec![ca_crt]);
    };
    let mut write = Write::new(
        layout.type_,
        version,
        vec![
            ca_crt,
            (layout.cert.as_str(), Content::LeafCert),
            (layout.key.as_str(), Content::LeafKey),
        ],
    );
    write.ca_annotation = Some(issue.signer.cert_ref());
    write.issue = Some(issue);
    write
}

/// The write of an HMAC Secret (read at `version`): `bytes` new random bytes under `key`.
pub(super) fn hmac(version: &Option<String>, key: &str, bytes: usize) -> Write {
    Write::new(TYPE_OPAQUE, version, vec![(key, Content::Random(bytes))])
}

/// Local mode: for a Secret the plan keeps, a write that changes no data but puts back the
/// files consumers read, and the reason the report gives; `None` when they are all in place.
pub(super) fn relink(stored: &StoredSecret) -> Option<(Write, String)> {
    if stored.divergent.is_empty() {
        return None;
    }
    let reason = format!(
        "restoring what consumers read: {}",
        stored
            .divergent
            .iter()
            .map(|d| d.describe())
            .collect::<Vec<_>>()
            .join("; ")
    );
    let type_ = if stored.type_ == TYPE_OPAQUE {
        TYPE_OPAQUE
    } else {
        TYPE_TLS
    };
    let mut write = Write::new(type_, &Some(stored.version.clone()), Vec::new());
    write.labels.clear();
    Some((write, reason))
}
