//! Who wrote what certgen manages: the API server's `managedFields` (manager, operation, time,
//! fields), parsed once here into plain values ([`FieldWrite`]), and the pure judgements the
//! run, `check`, the exporter and the Events share: which other field manager last wrote the
//! fields certgen owns ([`foreign_write`]), and whether that manager keeps undoing certgen's
//! writes ([`fight`]).
//!
//! The record of earlier undos a run keeps is the annotation [`HISTORY`] on the object it
//! writes anyway (a Secret); the exporter keeps its own in memory for what it watches. This
//! module must not read or write anything: the Kubernetes adapter hands it each entry's
//! `fieldsV1` as JSON, and the consumers get plain values back.

use std::collections::BTreeSet;
use std::fmt;

use time::OffsetDateTime;

/// certgen's own field manager (every write of `crate::k8s`).
pub const CERTGEN: &str = "certgen";
/// cert-manager's CA injector's field managers: `cert-manager-cainjector` as cert-manager 1.20
/// writes (seen on the real controller, v1.20.3), `cainjector` as older releases and
/// controller-runtime's default name it.
pub const CAINJECTORS: [&str; 2] = ["cert-manager-cainjector", "cainjector"];

/// Whether `manager` is cert-manager's CA injector.
pub fn is_cainjector(manager: &str) -> bool {
    CAINJECTORS.contains(&manager)
}
/// The field manager the API server gives to fields that existed before the first
/// server-side apply of an object.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";
/// The annotation on a Secret certgen writes that records the other managers that undid its
/// earlier writes: `manager@RFC3339` entries, comma-separated, newest last.
pub const HISTORY: &str = "certgen.dev/undone-by";
/// Two undos by the same manager within this long make a fight.
pub const FIGHT_WINDOW: time::Duration = time::Duration::hours(24);
/// At most this many undos are kept in [`HISTORY`].
const HISTORY_MAX: usize = 8;

pub use crate::secret::FieldWrite;

impl FieldWrite {
    /// The entry of `manager`'s `operation` at `time`, owning the fields of `fields_v1` (the
    /// entry's `fieldsV1` as JSON; `None`: owns nothing).
    pub fn parse(
        manager: &str,
        operation: &str,
        time: Option<OffsetDateTime>,
        fields_v1: Option<&serde_json::Value>,
    ) -> Self {
        let mut fields = BTreeSet::new();
        if let Some(v) = fields_v1 {
            leaves(v, &mut Vec::new(), &mut fields);
        }
        Self {
            manager: manager.to_string(),
            operation: operation.to_string(),
            time,
            fields,
        }
    }

    fn is_certgen(&self) -> bool {
        self.manager == CERTGEN
    }
}

/// The leaf paths of a `fieldsV1` tree: a node with no children but `.` is a leaf.
fn leaves(v: &serde_json::Value, path: &mut Vec<String>, out: &mut BTreeSet<String>) {
    let Some(map) = v.as_object() else {
        return;
    };
    let children: Vec<_> = map.iter().filter(|(k, _)| k.as_str() != ".").collect();
    if children.is_empty() {
        if !path.is_empty() {
            out.insert(path.join("/"));
        }
        return;
    }
    for (k, child) in children {
        path.push(k.strip_prefix("f:").unwrap_or(k).to_string());
        leaves(child, path, out);
        path.pop();
    }
}

/// Which fields certgen owns on an object.
#[derive(Debug, Clone, Copy)]
pub enum Owned<'a> {
    /// These data keys of a Secret.
    SecretData(&'a [&'a str]),
    /// Every `caBundle` of a webhook configuration, CRD or APIService.
    CaBundle,
    /// A ClusterTrustBundle's `spec.trustBundle`.
    TrustBundle,
}

impl Owned<'_> {
    fn covers(&self, path: &str) -> bool {
        match self {
            Self::SecretData(keys) => path
                .strip_prefix("data/")
                .is_some_and(|k| keys.contains(&k)),
            Self::CaBundle => path == "caBundle" || path.ends_with("/caBundle"),
            Self::TrustBundle => path == "spec/trustBundle",
        }
    }
}

/// How another manager's write of certgen's fields came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// It wrote them after certgen's last write: it undid certgen's work.
    Overwrote,
    /// They were written before certgen adopted the object, and certgen has not rewritten
    /// them since.
    BeforeAdoption,
    /// cert-manager's CA injector (`cainjector`) writes them.
    CaInjector,
}

impl Origin {
    /// Its name in reports and the metrics' `origin` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Overwrote => "overwrote",
            Self::BeforeAdoption => "before_adoption",
            Self::CaInjector => "cainjector",
        }
    }
}

/// The other manager that last wrote the fields certgen owns on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignWrite {
    pub manager: String,
    /// `Apply` (server-side apply) or `Update`.
    pub operation: String,
    pub time: Option<OffsetDateTime>,
    /// The fields of certgen's it holds (`data/ca.crt`), or those it removed.
    pub fields: Vec<String>,
    /// It removed them (no one owns them now, and they are gone from the object).
    pub removed: bool,
    pub origin: Origin,
}

impl fmt::Display for ForeignWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.removed { "removed" } else { "wrote" };
        let fields = if self.fields.is_empty() {
            "caBundle".to_string()
        } else {
            self.fields.join(", ")
        };
        let when = self
            .time
            .map(crate::timefmt::rfc3339)
            .unwrap_or_else(|| "an unknown time".into());
        match self.origin {
            Origin::CaInjector => write!(
                f,
                "cert-manager's CA injector (manager {}, {}) {what} {fields} at {when}",
                self.manager, self.operation
            ),
            Origin::BeforeAdoption => write!(
                f,
                "manager {} ({}) {what} {fields} at {when}, before certgen adopted it",
                self.manager, self.operation
            ),
            Origin::Overwrote => write!(
                f,
                "manager {} ({}) {what} {fields} at {when}, after certgen's last write",
                self.manager, self.operation
            ),
        }
    }
}

/// The other manager that last wrote (or removed) the fields `owned` of an object whose
/// `managedFields` are `writes`; `None` when certgen owns them all (or nobody else wrote
/// them). `missing`: some owned field is absent from the object (a removal leaves no owner,
/// so the newest other write after certgen's is taken as the one that removed it).
pub fn foreign_write(
    writes: &[FieldWrite],
    owned: Owned<'_>,
    missing: bool,
) -> Option<ForeignWrite> {
    let certgen_time = writes
        .iter()
        .filter(|w| w.is_certgen())
        .filter_map(|w| w.time)
        .max();
    let certgen_has = |field: &str| {
        writes
            .iter()
            .any(|w| w.is_certgen() && w.fields.contains(field))
    };
    let holder = writes
        .iter()
        .filter(|w| !w.is_certgen())
        .filter_map(|w| {
            let fields: Vec<String> = w
                .fields
                .iter()
                .filter(|p| owned.covers(p) && !certgen_has(p))
                .cloned()
                .collect();
            (!fields.is_empty()).then_some((w, fields, false))
        })
        .max_by_key(|(w, _, _)| w.time);
    let (w, fields, removed) = match holder {
        Some(h) => h,
        None if missing => {
            let after = certgen_time?;
            let w = writes
                .iter()
                .filter(|w| !w.is_certgen() && w.time.is_some_and(|t| t >= after))
                .max_by_key(|w| w.time)?;
            (w, Vec::new(), true)
        }
        None => return None,
    };
    let origin = if is_cainjector(&w.manager) {
        Origin::CaInjector
    } else if w.manager == BEFORE_FIRST_APPLY {
        Origin::BeforeAdoption
    } else {
        match (certgen_time, w.time) {
            (Some(c), Some(t)) if t >= c => Origin::Overwrote,
            _ => Origin::BeforeAdoption,
        }
    };
    Some(ForeignWrite {
        manager: w.manager.clone(),
        operation: w.operation.clone(),
        time: w.time,
        fields,
        removed,
        origin,
    })
}

/// One earlier undo of certgen's write: by whom, and when.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Undo {
    pub at: OffsetDateTime,
    pub manager: String,
}

/// The undos recorded in the annotation value `value` ([`HISTORY`]); entries that cannot be
/// read are skipped.
pub fn history(value: Option<&str>) -> Vec<Undo> {
    let mut out: Vec<Undo> = value
        .unwrap_or_default()
        .split(',')
        .filter_map(|e| {
            let (manager, at) = e.trim().rsplit_once('@')?;
            Some(Undo {
                at: crate::timefmt::parse_rfc3339(at)?,
                manager: manager.to_string(),
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The undo `current` is, if it is one (another manager overwrote certgen's write).
pub fn undo_of(current: &ForeignWrite) -> Option<Undo> {
    match (current.origin, current.time) {
        (Origin::Overwrote, Some(at)) => Some(Undo {
            at,
            manager: current.manager.clone(),
        }),
        _ => None,
    }
}

/// The value of [`HISTORY`] a write of the object records: the undos of `earlier` and
/// `current` within [`FIGHT_WINDOW`] of `now`, newest kept. `None` when there is nothing to
/// record and nothing recorded (the annotation is not written).
pub fn record(
    earlier: &[Undo],
    current: Option<&ForeignWrite>,
    now: OffsetDateTime,
) -> Option<String> {
    let mut all: Vec<Undo> = earlier.to_vec();
    all.extend(current.and_then(undo_of));
    all.sort();
    all.dedup();
    all.retain(|u| u.at + FIGHT_WINDOW > now);
    if all.is_empty() {
        return (!earlier.is_empty()).then(String::new);
    }
    let skip = all.len().saturating_sub(HISTORY_MAX);
    let entries: Vec<String> = all[skip..]
        .iter()
        .map(|u| {
            let manager: String = u
                .manager
                .chars()
                .filter(|c| *c != ',' && *c != '@')
                .collect();
            format!("{manager}@{}", crate::timefmt::rfc3339(u.at))
        })
        .collect();
    Some(entries.join(","))
}

/// A fight: the same other manager undid certgen's writes at least twice within
/// [`FIGHT_WINDOW`], the last of them still standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fight {
    pub manager: String,
    /// When it undid them, oldest first.
    pub undos: Vec<OffsetDateTime>,
}

impl fmt::Display for Fight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let times: Vec<String> = self
            .undos
            .iter()
            .map(|t| crate::timefmt::rfc3339(*t))
            .collect();
        write!(
            f,
            "certgen and manager {} are fighting over it: {} undid certgen's write {} times within 24h ({})",
            self.manager,
            self.manager,
            self.undos.len(),
            times.join(", ")
        )
    }
}

/// Whether `current` (the write standing now) is a fight, given the `earlier` undos recorded
/// (the annotation's, or what the exporter saw): two or more undos by its manager within
/// [`FIGHT_WINDOW`] of `now`. A write certgen has taken back (no `current`) is no fight.
pub fn fight(
    earlier: &[Undo],
    current: Option<&ForeignWrite>,
    now: OffsetDateTime,
) -> Option<Fight> {
    let last = undo_of(current?)?;
    let mut undos: Vec<OffsetDateTime> = earlier
        .iter()
        .filter(|u| u.manager == last.manager)
        .map(|u| u.at)
        .chain(std::iter::once(last.at))
        .filter(|t| *t + FIGHT_WINDOW > now)
        .collect();
    undos.sort();
    undos.dedup();
    (undos.len() >= 2).then_some(Fight {
        manager: last.manager,
        undos,
    })
}

#[cfg(test)]
mod tests;
