//! A set of clusters that share one CA (`--context a --context b ...`): the record every
//! member's CA Secret carries, the members' identities, and the rule that a member's own
//! single-cluster run (its CronJob, a Helm hook) never forks the shared CA.
//!
//! The driver of a run over a set is `rotation::set`; this module is pure.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::Config;
use crate::error::Error;
use crate::observe::Snapshot;
use crate::plan::{Phase, Plan};

/// The annotation on each member's CA Secret that records the set (JSON, [`Record`]).
pub const SET_ANNOTATION: &str = "certgen.dev/set";

/// The set a member belongs to, as its CA Secret records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// The set's id: made once, when the set is first written.
    pub id: String,
    /// The members' `kube-system` Namespace UIDs, sorted.
    pub members: Vec<String>,
    /// The contexts the set's last run used, for messages (a context may be renamed: the
    /// members are their UIDs).
    #[serde(default)]
    pub contexts: Vec<String>,
    /// Counts the membership changes.
    pub generation: u64,
}

impl Record {
    /// The record on the CA Secret as read, if any. A record that does not parse is an error
    /// naming the Secret: certgen will not guess whether a CA is shared.
    pub fn read(
        config: &Config,
        observed: &Snapshot,
        object: &dyn Fn(&str) -> String,
    ) -> Result<Option<Self>, Error> {
        let Some(ca) = observed.ca.as_ref().and_then(|o| o.present()) else {
            return Ok(None);
        };
        let Some(text) = ca.annotations.get(SET_ANNOTATION) else {
            return Ok(None);
        };
        serde_json::from_str(text).map(Some).map_err(|e| {
            Error::Invalid(crate::plan::Invalid {
                object: object(&config.ca.secret_name),
                problem: format!("its annotation {SET_ANNOTATION} does not parse ({e})"),
                fix: format!(
                    "restore the annotation from another member's CA Secret, or remove it (kubectl annotate secret {} {SET_ANNOTATION}-) if this cluster is not in a set of clusters",
                    config.ca.secret_name
                ),
            })
        })
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }

    /// The contexts to name in a message: the recorded ones, as `--context` flags.
    pub fn context_flags(&self) -> String {
        if self.contexts.is_empty() {
            return format!("a --context for each of its {} members", self.members.len());
        }
        self.contexts
            .iter()
            .map(|c| format!("--context {c}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A new set's id: short, made from its first members and the moment it was made (an id,
/// never key material).
pub fn new_id(members: &BTreeSet<&str>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for m in members {
        h.update(m.as_bytes());
        h.update([0]);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.update(nanos.to_be_bytes());
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The membership changes the command line names, checked against the set's record
/// `newest`: the UIDs of the members `--add-member` adds (each must be a `--context` of the
/// run) and of those `--remove-member` removes (each must be a recorded member the run does
/// not go over).
fn changes<'m>(
    members: &'m [(String, String)],
    newest: &Record,
    (added, removed): (&'m [String], &'m [String]),
) -> Result<(BTreeSet<&'m str>, BTreeSet<&'m str>), String> {
    let by_context = |c: &str| {
        members
            .iter()
            .find(|(ctx, _)| ctx == c)
            .map(|(_, u)| u.as_str())
    };
    // Removed: the UID of a member the run does not go over.
    for r in removed {
        if by_context(r).is_some() {
            return Err(format!(
                "--remove-member {r}: {r} is on the command line (--context {r}); a member taken out of the set is one the run does not go over: leave its --context off"
            ));
        }
        if !newest.members.iter().any(|m| m == r) {
            return Err(format!(
                "--remove-member {r}: no member of the set {} has the kube-system UID {r} (its members: {}); give the UID the set's record shows",
                newest.id,
                newest.members.join(", ")
            ));
        }
    }
    let removed_uids: BTreeSet<&str> = removed.iter().map(String::as_str).collect();
    let mut added_uids: BTreeSet<&str> = BTreeSet::new();
    for a in added {
        let Some(uid) = by_context(a) else {
            return Err(format!(
                "--add-member {a}: {a} is not among the --context flags; a member added to the set is one the run goes over: pass --context {a} too"
            ));
        };
        added_uids.insert(uid);
    }
    Ok((added_uids, removed_uids))
}

/// The members a set's run is over, by UID, against what the reachable members record: the
/// record to write, or why the run is refused. `recorded`: each member's record, if any (by
/// context); `added`, `removed`: the membership changes the command line names.
pub fn membership(
    members: &[(String, String)],
    recorded: &[(String, Option<Record>)],
    (added, removed): (&[String], &[String]),
) -> Result<Record, String> {
    let uids: BTreeSet<&str> = members.iter().map(|(_, uid)| uid.as_str()).collect();
    let records: Vec<&Record> = recorded.iter().filter_map(|(_, r)| r.as_ref()).collect();
    // The newest record (highest generation) is the set's; members behind it are brought up
    // to date by this run's writes.
    let newest = records.iter().max_by_key(|r| r.generation).copied();
    let ids: BTreeSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    if ids.len() > 1 {
        let which: Vec<String> = recorded
            .iter()
            .filter_map(|(ctx, r)| Some(format!("{ctx} in set {}", r.as_ref()?.id)))
            .collect();
        return Err(format!(
            "the members belong to different sets ({}): a cluster is in one set at a time; run certgen over each set's own contexts",
            which.join(", ")
        ));
    }
    let contexts: Vec<String> = members.iter().map(|(c, _)| c.clone()).collect();
    let Some(newest) = newest else {
        return Ok(Record {
            id: new_id(&uids),
            members: uids.iter().map(|u| u.to_string()).collect(),
            contexts,
            generation: 1,
        });
    };
    let recorded_uids: BTreeSet<&str> = newest.members.iter().map(String::as_str).collect();
    let (added_uids, removed_uids) = changes(members, newest, (added, removed))?;
    let missing: Vec<&str> = recorded_uids
        .iter()
        .filter(|u| !uids.contains(*u) && !removed_uids.contains(*u))
        .copied()
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the set {} has members that are not on the command line (kube-system UIDs {}): pass their contexts too ({}), or take them out of the set with --remove-member UID",
            newest.id,
            missing.join(", "),
            newest.context_flags()
        ));
    }
    let new: Vec<&str> = uids
        .iter()
        .filter(|u| !recorded_uids.contains(*u) && !added_uids.contains(*u))
        .copied()
        .collect();
    if !new.is_empty() {
        let names: Vec<String> = members
            .iter()
            .filter(|(_, u)| new.contains(&u.as_str()))
            .map(|(c, _)| c.clone())
            .collect();
        return Err(format!(
            "{} {} not in the set {} its other members record: add a cluster to a set with --add-member CONTEXT (it enters through a trust step)",
            names.join(", "),
            if names.len() == 1 { "is" } else { "are" },
            newest.id
        ));
    }
    let changed =
        uids.len() != recorded_uids.len() || uids.iter().any(|u| !recorded_uids.contains(u));
    Ok(Record {
        id: newest.id.clone(),
        members: uids.iter().map(|u| u.to_string()).collect(),
        contexts,
        generation: newest.generation + u64::from(changed),
    })
}

/// A single-cluster run (one context, or none) in a member of a set: it may renew leaves with
/// the shared CA, but never creates, rotates, promotes or drops a CA there, since the other
/// members would not follow. Such a plan is refused with what to run instead (exit 1).
pub fn refuse_shared_ca(
    config: &Config,
    observed: &Snapshot,
    (plan, overwrite): (&Plan, bool),
    object: &dyn Fn(&str) -> String,
) -> Result<(), Error> {
    let changes_ca = plan.ca.new.is_some()
        || plan.ca.action.writes()
        || plan.under_way
        || matches!(
            plan.phase,
            Phase::Trust | Phase::Leaves | Phase::Cleanup { .. }
        )
        || matches!(
            plan.phase,
            Phase::Gate {
                pending: Some(_),
                ..
            }
        );
    if !changes_ca {
        return Ok(());
    }
    let Some(record) = Record::read(config, observed, object)? else {
        return Ok(());
    };
    let what = if plan.under_way || matches!(plan.phase, Phase::Leaves | Phase::Cleanup { .. }) {
        "a rotation of the shared CA is under way"
    } else if overwrite {
        "--overwrite asks to rotate the shared CA"
    } else {
        "the shared CA is due"
    };
    Err(Error::SharedCaDue {
        object: object(&config.ca.secret_name),
        message: format!(
            "this CA is shared by a set of {} clusters (set {}): {what}: run certgen with the set's contexts ({}); a run in one member alone never changes the shared CA, so that the members keep trusting each other",
            record.members.len(),
            record.id,
            record.context_flags()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(c, u)| (c.to_string(), u.to_string()))
            .collect()
    }

    fn record(members: &[&str], generation: u64) -> Record {
        Record {
            id: "s1".into(),
            members: members.iter().map(|s| s.to_string()).collect(),
            contexts: vec![],
            generation,
        }
    }

    #[test]
    fn a_first_run_records_every_member() {
        let members = m(&[("a", "u2"), ("b", "u1")]);
        let r = membership(
            &members,
            &[("a".into(), None), ("b".into(), None)],
            (&[], &[]),
        )
        .unwrap();
        assert_eq!(r.members, vec!["u1", "u2"]);
        assert_eq!(r.generation, 1);
        assert_eq!(r.contexts, vec!["a", "b"]);
    }

    #[test]
    fn a_renamed_context_is_the_same_member() {
        let members = m(&[("renamed", "u1"), ("b", "u2")]);
        let rec = record(&["u1", "u2"], 3);
        let r = membership(
            &members,
            &[
                ("renamed".into(), Some(rec.clone())),
                ("b".into(), Some(rec)),
            ],
            (&[], &[]),
        )
        .unwrap();
        assert_eq!((r.id.as_str(), r.generation), ("s1", 3));
    }

    #[test]
    fn a_member_left_out_is_refused_unless_removed() {
        let members = m(&[("a", "u1"), ("b", "u2")]);
        let rec = record(&["u1", "u2", "u3"], 1);
        let recorded = [("a".into(), Some(rec.clone())), ("b".into(), Some(rec))];
        let e = membership(&members, &recorded, (&[], &[])).unwrap_err();
        assert!(e.contains("u3") && e.contains("--remove-member"), "{e}");
        let r = membership(&members, &recorded, (&[], &["u3".into()])).unwrap();
        assert_eq!((r.members.len(), r.generation), (2, 2));
    }

    #[test]
    fn a_new_member_needs_add_member() {
        let members = m(&[("a", "u1"), ("b", "u2"), ("c", "u3")]);
        let rec = record(&["u1", "u2"], 1);
        let recorded = [
            ("a".into(), Some(rec.clone())),
            ("b".into(), Some(rec)),
            ("c".into(), None),
        ];
        let e = membership(&members, &recorded, (&[], &[])).unwrap_err();
        assert!(
            e.starts_with("c is not in the set") && e.contains("--add-member"),
            "{e}"
        );
        let r = membership(&members, &recorded, (&["c".into()], &[])).unwrap();
        assert_eq!((r.members.len(), r.generation), (3, 2));
    }

    #[test]
    fn membership_changes_name_members_the_run_can_tell() {
        let members = m(&[("a", "u1"), ("b", "u2")]);
        let rec = record(&["u1", "u2", "u3"], 1);
        let recorded = [("a".into(), Some(rec.clone())), ("b".into(), Some(rec))];
        let e = membership(&members, &recorded, (&[], &["b".into()])).unwrap_err();
        assert!(e.contains("is on the command line"), "{e}");
        let e = membership(&members, &recorded, (&[], &["u9".into()])).unwrap_err();
        assert!(e.contains("no member of the set s1"), "{e}");
        let e = membership(&members, &recorded, (&["c".into()], &["u3".into()])).unwrap_err();
        assert!(e.contains("pass --context c too"), "{e}");
    }

    #[test]
    fn members_of_two_sets_are_refused() {
        let members = m(&[("a", "u1"), ("b", "u2")]);
        let mut other = record(&["u2"], 1);
        other.id = "s2".into();
        let recorded = [
            ("a".into(), Some(record(&["u1"], 1))),
            ("b".into(), Some(other)),
        ];
        let e = membership(&members, &recorded, (&[], &[])).unwrap_err();
        assert!(e.contains("different sets"), "{e}");
    }
}

/// Where one member stands in the set's rotation, from what its Secrets hold: the CA Secret's
/// active and pending CAs, each TLS Secret's bundle and the CA that signed its leaf.
#[derive(Debug, Clone, Default)]
pub struct Standing {
    pub active: Option<crate::pki::Cert>,
    pub pending: Option<crate::pki::Cert>,
    /// Each TLS Secret's bundle, by fingerprint.
    pub bundles: Vec<Vec<[u8; 32]>>,
    /// Each TLS Secret's leaf.
    pub leaves: Vec<crate::pki::Cert>,
}

impl Standing {
    /// Reads a member's standing from its Secrets as observed (nothing stored: default).
    pub fn of(config: &Config, observed: &Snapshot) -> Self {
        use crate::pki::{parse_cert_chain, parse_single_cert};
        let mut s = Self::default();
        if let Some(ca) = observed.ca.as_ref().and_then(|o| o.present()) {
            let first = |key: &str| ca.data.get(key).and_then(|b| parse_single_cert(b).ok());
            s.active = first(&config.ca.layout.cert).or_else(|| first(&config.ca.layout.bundle));
            s.pending = first("next.crt");
        }
        for t in &config.tls {
            let Some(sec) = observed.get(&t.name).present() else {
                continue;
            };
            if let Some(b) = sec.data.get(&t.layout.bundle)
                && let Ok(certs) = parse_cert_chain(b)
            {
                s.bundles
                    .push(certs.iter().map(|c| c.fingerprint()).collect());
            }
            if let Some(l) = sec.data.get(&t.layout.cert)
                && let Ok(leaf) = parse_single_cert(l)
            {
                s.leaves.push(leaf);
            }
        }
        s
    }
}

/// The set's line: where every member stands against the set's newest CA (a pending one, or
/// the active CA most members hold), e.g. `trust 3/3, leaves 2/3, cleanup pending`.
pub fn set_line(members: &[Standing]) -> String {
    let n = members.len();
    let newest = members.iter().find_map(|m| m.pending.clone()).or_else(|| {
        let mut counts: BTreeMap<[u8; 32], (usize, crate::pki::Cert)> = BTreeMap::new();
        for a in members.iter().filter_map(|m| m.active.as_ref()) {
            counts.entry(a.fingerprint()).or_insert((0, a.clone())).0 += 1;
        }
        counts.into_values().max_by_key(|(c, _)| *c).map(|(_, a)| a)
    });
    let Some(ca) = newest else {
        return format!("no CA in any of the {n} members yet");
    };
    let fp = ca.fingerprint();
    let trusts = members
        .iter()
        .filter(|m| !m.bundles.is_empty() && m.bundles.iter().all(|b| b.contains(&fp)))
        .count();
    let leaves = members
        .iter()
        .filter(|m| !m.leaves.is_empty() && m.leaves.iter().all(|l| ca.signed(l)))
        .count();
    let clean = members
        .iter()
        .filter(|m| !m.bundles.is_empty() && m.bundles.iter().all(|b| b == &vec![fp]))
        .count();
    let cleanup = if clean == n {
        "cleanup done".to_string()
    } else {
        format!("cleanup {clean}/{n}")
    };
    format!(
        "CA {}: trust {trusts}/{n}, leaves {leaves}/{n}, {cleanup}",
        ca.short_fingerprint()
    )
}
