//! ClusterTrustBundles as a trust target (issue 43), the pure rules: what certgen names and
//! labels each bundle it publishes, which bundles the CAs of a Secret's bundle call for, and
//! whether a pod's `clusterTrustBundle` projection reads them. No IO and no Kubernetes type:
//! the adapter is `crate::k8s::trust_bundles`, the planned actions `crate::rotation::trust_bundles`.
//!
//! certgen keeps **one signer-linked bundle per CA** of the bundle it follows (a TLS Secret's
//! `ca.crt`), named `<signer, / replaced by :>:<the CA's short fingerprint>` and labelled with
//! the configured labels, `app.kubernetes.io/managed-by: certgen` and the fingerprint. A
//! consumer projects them with `signerName` and a `labelSelector` (the kubelet writes the union
//! of every matching bundle), so a staged rotation is: the new CA's bundle created beside the
//! current one (trust), the leaves switched (leaves), the old CA's bundle deleted (cleanup),
//! each behind its gate. A bundle never holds nothing (the API server refuses an empty one,
//! and each of certgen's holds exactly one CA).

use std::collections::BTreeMap;

use crate::config::{MANAGED_BY, MANAGED_BY_LABEL};
use crate::pki::Cert;

/// A ClusterTrustBundle as read: one certgen published for a CA, or another writer's bundle
/// linked to the same signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleRead {
    pub name: String,
    pub uid: String,
    /// The resourceVersion an update or delete must match.
    pub version: String,
    pub labels: BTreeMap<String, String>,
    /// `spec.trustBundle`: PEM certificates.
    pub pem: String,
    /// When the object last changed, by the store's clock (rounded up to the second).
    pub written_at: Option<time::OffsetDateTime>,
    /// Who wrote which fields (`managedFields`).
    pub writes: Vec<crate::secret::FieldWrite>,
}

/// The label that names the CA a bundle publishes (its short fingerprint).
pub const CA_LABEL: &str = "certgen.dev/ca";

/// The name certgen gives the bundle of `ca` for `signer`: the API server requires a
/// signer-linked bundle's name to start with the signer name, `/` replaced by `:`, then `:`.
pub fn object_name(signer: &str, short_fingerprint: &str) -> String {
    format!("{}:{short_fingerprint}", signer.replace('/', ":"))
}

/// The labels of the bundle certgen writes for `ca`: the configured ones, then its own.
pub fn labels_for(configured: &BTreeMap<String, String>, ca: &Cert) -> BTreeMap<String, String> {
    let mut labels = configured.clone();
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string());
    labels.insert(CA_LABEL.to_string(), ca.short_fingerprint());
    labels
}

/// Whether a bundle's labels say this installation of certgen wrote it for one CA: certgen's
/// own labels, and every label of the target (`target`: the configured ones and the
/// installation's, `crate::config::bundle_owner`).
pub fn is_ours(labels: &BTreeMap<String, String>, target: &BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY)
        && labels.contains_key(CA_LABEL)
        && target.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// One action on one bundle, planned by [`actions`].
#[derive(Debug, Clone)]
pub enum BundleAction {
    /// A CA of the published bundle has no bundle yet. `pem`: `None` when the CA is not
    /// generated yet (a dry run's).
    Create {
        name: String,
        labels: BTreeMap<String, String>,
        pem: Option<String>,
    },
    /// A bundle of certgen's name whose contents or labels another writer changed.
    Update {
        read: BundleRead,
        labels: BTreeMap<String, String>,
        pem: String,
    },
    /// certgen's bundle of a CA the published bundle no longer holds.
    Delete { read: BundleRead },
}

impl BundleAction {
    /// The bundle it acts on.
    pub fn name(&self) -> &str {
        match self {
            Self::Create { name, .. } => name,
            Self::Update { read, .. } | Self::Delete { read } => &read.name,
        }
    }
}

/// What publishing `cas` (each CA's short fingerprint, with its certificate when it exists)
/// for `signer` takes, given every bundle of the signer as `read`: a create for each CA without
/// its bundle, an update for each of certgen's bundles another writer changed, then a delete for
/// each of certgen's bundles of a CA no longer in `cas` (none when `cas` is empty: never down to
/// nothing). The second list: the signer's bundles certgen did not write, left alone. One
/// judgement for the run's plan and for `check`.
pub fn actions(
    signer: &str,
    configured: &BTreeMap<String, String>,
    read: &[BundleRead],
    cas: &[(String, Option<Cert>)],
) -> (Vec<BundleAction>, Vec<String>) {
    let (mut actions, mut foreign, mut names) = (Vec::new(), Vec::new(), Vec::new());
    // Creates oldest CA first (a CA the step generates last; the driver's `signers_first` then
    // puts the CAs that sign the leaves ahead): each create is a union the consumers may
    // project before the next lands. Migrating from another tool's CA, both are published in
    // one step.
    let mut order: Vec<&(String, Option<Cert>)> = cas.iter().collect();
    order.sort_by_key(|(_, c)| (c.is_none(), c.as_ref().map(|c| c.not_before)));
    for (fp, cert) in order {
        let Some(cert) = cert else {
            actions.push(BundleAction::Create {
                name: object_name(signer, "<new CA>"),
                labels: configured.clone(),
                pem: None,
            });
            continue;
        };
        let name = object_name(signer, fp);
        let labels = labels_for(configured, cert);
        match read.iter().find(|b| b.name == name) {
            None => actions.push(BundleAction::Create {
                name: name.clone(),
                labels,
                pem: Some(cert.pem()),
            }),
            Some(b) if !holds(b, cert) || b.labels != labels => {
                actions.push(BundleAction::Update {
                    read: b.clone(),
                    labels,
                    pem: cert.pem(),
                });
            }
            Some(_) => {}
        }
        names.push(name);
    }
    for b in read.iter().filter(|b| !names.contains(&b.name)) {
        if !is_ours(&b.labels, configured) {
            foreign.push(b.name.clone());
        } else if !cas.is_empty() {
            actions.push(BundleAction::Delete { read: b.clone() });
        }
    }
    (actions, foreign)
}

/// Whether a bundle holds exactly `cert`.
fn holds(b: &BundleRead, cert: &Cert) -> bool {
    crate::pki::parse_cert_chain(b.pem.as_bytes())
        .is_ok_and(|certs| certs.len() == 1 && certs[0].der() == cert.der())
}

/// A label selector as a projection writes it (`matchLabels`, `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    pub values: Vec<String>,
}

impl Selector {
    /// Whether `labels` match, as the API server's label selectors do (an unknown operator
    /// matches nothing: the API server would have refused it).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// A pod's `clusterTrustBundle` projection, as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    /// By name (mutually exclusive with `signer`).
    pub name: Option<String>,
    pub signer: Option<String>,
    /// With `signer`: `None` selects nothing, an empty selector everything (the API's rule).
    pub selector: Option<Selector>,
}

/// How a projection reads the bundles certgen publishes for one signer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// By `signerName` and a selector that matches certgen's labels: the kubelet clears its
    /// cached union on every change of a matching bundle (a poke makes it re-project at once).
    BySelector,
    /// By the name of one of certgen's bundles: it pins one CA (the cleanup deletes it), and
    /// the kubelet may keep such a bundle cached for 5 minutes (kubernetes #141439).
    ByName,
}

/// Whether `projection` reads the bundles certgen keeps for `signer` with `labels` (configured)
/// and how. A selector that matches the configured labels together with certgen's own
/// (whatever the CA) reads them.
pub fn reads(
    projection: &Projection,
    signer: &str,
    configured: &BTreeMap<String, String>,
) -> Option<Reads> {
    if let Some(name) = &projection.name {
        let prefix = format!("{}:", signer.replace('/', ":"));
        return name.starts_with(&prefix).then_some(Reads::ByName);
    }
    if projection.signer.as_deref() != Some(signer) {
        return None;
    }
    let selector = projection.selector.as_ref()?;
    // Any CA's bundle: the fingerprint label's value varies, so an expression on it is
    // judged with a placeholder no selector names.
    let mut labels = configured.clone();
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string());
    labels.insert(CA_LABEL.to_string(), "any".to_string());
    selector.matches(&labels).then_some(Reads::BySelector)
}

/// The name by which the gate counts what a pod projects of one signer's bundles, beside the
/// Secrets it mounts (`crate::outside::PodView::secrets`): a write to any of those bundles is a
/// write to this name.
pub fn mount_name(signer: &str) -> String {
    format!("ClusterTrustBundles {signer}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn names_start_with_the_signer_as_the_api_server_requires() {
        assert_eq!(
            object_name("example.com/mesh", "0123456789abcdef"),
            "example.com:mesh:0123456789abcdef"
        );
    }

    #[test]
    fn a_projection_reads_the_bundles_by_selector_or_pins_one_by_name() {
        let configured = labels(&[("mesh", "a")]);
        let by = |signer: Option<&str>, selector: Option<Selector>| Projection {
            name: None,
            signer: signer.map(str::to_string),
            selector,
        };
        let select = |pairs: &[(&str, &str)]| Selector {
            match_labels: labels(pairs),
            match_expressions: Vec::new(),
        };
        let s = "example.com/mesh";
        assert_eq!(
            reads(&by(Some(s), Some(select(&[("mesh", "a")]))), s, &configured),
            Some(Reads::BySelector)
        );
        // An empty selector selects every bundle of the signer.
        assert_eq!(
            reads(&by(Some(s), Some(Selector::default())), s, &configured),
            Some(Reads::BySelector)
        );
        // No selector selects nothing; another label value, another signer: not ours.
        assert_eq!(reads(&by(Some(s), None), s, &configured), None);
        assert_eq!(
            reads(&by(Some(s), Some(select(&[("mesh", "b")]))), s, &configured),
            None
        );
        assert_eq!(
            reads(
                &by(Some("example.com/other"), Some(Selector::default())),
                s,
                &configured
            ),
            None
        );
        let pinned = Projection {
            name: Some("example.com:mesh:0123456789abcdef".into()),
            signer: None,
            selector: None,
        };
        assert_eq!(reads(&pinned, s, &configured), Some(Reads::ByName));
    }

    #[test]
    fn expressions_follow_the_api_servers_rules() {
        let l = labels(&[("a", "1")]);
        let expr = |key: &str, op: &str, values: &[&str]| Selector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![Requirement {
                key: key.into(),
                operator: op.into(),
                values: values.iter().map(|v| v.to_string()).collect(),
            }],
        };
        assert!(expr("a", "In", &["1", "2"]).matches(&l));
        assert!(!expr("a", "NotIn", &["1"]).matches(&l));
        assert!(expr("b", "NotIn", &["1"]).matches(&l));
        assert!(expr("a", "Exists", &[]).matches(&l));
        assert!(expr("b", "DoesNotExist", &[]).matches(&l));
        assert!(!expr("a", "Gt", &["0"]).matches(&l));
    }
}
