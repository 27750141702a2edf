//! certgen's own CA Secret gone while leaves it signed remain: the key of a CA that consumers
//! trust is lost, and certgen cannot reach that CA again by itself. The state is never
//! healthy: a plain run refuses it, naming both ways out (restore the CA Secret from a backup
//! to keep the CA, or `--overwrite` to stage a new one), and `check` says the same. It is
//! recognised by certgen's own mark on the leaves it issues (the [`CA_ANNOTATION`]
//! annotation, in a cluster and in local mode alike), never by names: leaves another tool
//! wrote carry no such mark, and their CA is adopted as before.

use time::OffsetDateTime;

use super::writes::CA_ANNOTATION;
use crate::observe::Snapshot;
use crate::pki::Cert;

/// A CA certgen issued leaves from, whose Secret (and with it the key) is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostCa {
    /// The CA, as the leaves' bundles hold it.
    pub ca: Cert,
    /// The TLS Secrets whose leaves it signed and which name it.
    pub secrets: Vec<String>,
}

impl LostCa {
    /// What is wrong, for an error or a report line.
    pub fn problem(&self) -> String {
        let (which, hold) = match self.secrets.as_slice() {
            [one] => (format!("Secret {one}"), "holds"),
            many => (format!("Secrets {}", many.join(", ")), "hold"),
        };
        format!(
            "certgen's CA Secret is gone, but {which} still {hold} leaves certgen issued from its CA {} (annotation {CA_ANNOTATION}): that CA's key was kept in the CA Secret and is lost, so certgen cannot renew a leaf with it",
            self.ca.short_fingerprint()
        )
    }

    /// The two ways out, for the CA Secret `object` (`Secret ns/name`, or a path).
    pub fn fix(&self, object: &str) -> String {
        format!(
            "nothing was written. To keep the CA every consumer trusts, restore {object} from a backup (kubectl apply -f the saved Secret; in local mode, the saved directory), then run certgen again. Or start a new CA now with `certgen --overwrite` (for what `certgen create` manages: `certgen --config FILE --overwrite`, FILE printed by `certgen create … --print-config`): staged, so the lost CA stays trusted until every leaf has moved to the new one (docs/alerts.md#certgencakeylost)"
        )
    }
}

/// Whether certgen's CA Secret is absent from `observed` while a TLS Secret holds a leaf
/// certgen issued: of `held` (each TLS Secret's name, leaf and bundle, as the caller parsed
/// them), one whose [`CA_ANNOTATION`] names a CA of its own bundle that signed the leaf and is
/// valid at `now`. The first such CA, with every Secret whose leaf it signed. The planner and
/// `check` both ask it.
pub fn find<'a>(
    observed: &Snapshot,
    held: impl Iterator<Item = (&'a str, &'a Cert, &'a [Cert])> + Clone,
    now: OffsetDateTime,
) -> Option<LostCa> {
    if observed.ca().present().is_some() {
        return None;
    }
    let named = |(name, leaf, bundle): (&str, &Cert, &[Cert])| -> Option<Cert> {
        let mark = observed
            .get(name)
            .present()?
            .annotations
            .get(CA_ANNOTATION)?;
        bundle
            .iter()
            .find(|c| {
                c.fingerprint_hex() == *mark && c.is_ca && c.signed(leaf) && !c.is_expired_at(now)
            })
            .cloned()
    };
    let ca = held.clone().find_map(named)?;
    let secrets = held
        .filter(|(_, leaf, _)| ca.signed(leaf))
        .map(|(name, _, _)| name.to_string())
        .collect();
    Some(LostCa { ca, secrets })
}
