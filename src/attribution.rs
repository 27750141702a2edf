//! Other writers, named: for each object certgen manages or follows, the other field manager
//! that last wrote the fields certgen owns there, and whether it keeps undoing certgen's
//! writes (a fight). Pure: the objects as observed (their `managedFields` already parsed by
//! [`crate::observe::writers`]), the undos recorded earlier and `now` in; plain values out,
//! which `check` (text, JSON, metrics), the exporter, the run's report and its Events render.
//! It must not read, write or render anything.

use std::collections::BTreeMap;

use time::OffsetDateTime;

use crate::config::Config;
use crate::observe::Snapshot;
use crate::observe::writers::{self, FieldWrite, Fight, ForeignWrite, Owned, Undo};
use crate::secret::StoredSecret;

/// The other writer of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    /// `Secret`, `MutatingWebhookConfiguration`, ...
    pub kind: String,
    pub name: String,
    pub write: ForeignWrite,
    /// It keeps undoing certgen's writes.
    pub fight: Option<Fight>,
}

impl Writer {
    /// The key of the object in records of undos: `Kind/name`.
    pub fn key(&self) -> String {
        key(&self.kind, &self.name)
    }

    /// One line for people: the object, who wrote it, and the fight if there is one.
    pub fn text(&self) -> String {
        match &self.fight {
            Some(f) => format!("{} {}: {}; {f}", self.kind, self.name, self.write),
            None => format!("{} {}: {}", self.kind, self.name, self.write),
        }
    }
}

/// The key of an object in records of undos: `Kind/name`.
pub fn key(kind: &str, name: &str) -> String {
    format!("{kind}/{name}")
}

/// The data keys certgen owns in Secret `name`, and those a stored copy must hold.
pub fn keys_of(config: &Config, name: &str) -> (Vec<String>, Vec<String>) {
    if name == config.ca.secret_name {
        let l = config.ca.layout.clone();
        let all = vec![
            l.cert.clone(),
            l.key.clone(),
            l.bundle,
            "next.crt".into(),
            "next.key".into(),
        ];
        return (all, vec![l.cert, l.key]);
    }
    if let Some(h) = config.hmac.iter().find(|h| h.name == name) {
        return (vec![h.key.clone()], vec![h.key.clone()]);
    }
    let l = config.layout_of(name);
    let all = vec![l.bundle, l.cert, l.key];
    (all.clone(), all)
}

/// Adds the undo `w` stands for (if it is one) to `undos`, pruned to the fight window of
/// `now` and bounded: the exporter's memory of what it watched.
pub fn remember(undos: &mut Vec<Undo>, w: Option<&Writer>, now: OffsetDateTime) {
    if let Some(u) = w.and_then(|w| writers::undo_of(&w.write)) {
        undos.push(u);
    }
    undos.sort();
    undos.dedup();
    undos.retain(|u| u.at + writers::FIGHT_WINDOW > now);
    let extra = undos.len().saturating_sub(16);
    undos.drain(..extra);
}

/// The other writer of Secret `s` (certgen owns `keys`, of which it must hold `required`),
/// with the undos recorded on it ([`writers::HISTORY`]) and `seen` elsewhere.
pub fn of_secret(
    s: &StoredSecret,
    (keys, required): (&[String], &[String]),
    seen: &[Undo],
    now: OffsetDateTime,
) -> Option<Writer> {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let missing = required.iter().any(|k| !s.data.contains_key(k));
    let write = writers::foreign_write(&s.writes, Owned::SecretData(&keys), missing)?;
    let mut earlier = recorded(s);
    earlier.extend(seen.iter().cloned());
    let fight = writers::fight(&earlier, Some(&write), now);
    Some(Writer {
        kind: "Secret".into(),
        name: s.name.clone(),
        write,
        fight,
    })
}

/// The undos recorded on Secret `s`.
pub fn recorded(s: &StoredSecret) -> Vec<Undo> {
    writers::history(s.annotations.get(writers::HISTORY).map(String::as_str))
}

/// The other writer of a `caBundle` target `kind name` whose `managedFields` are `writes`
/// (`missing`: an entry has no `caBundle`), with the undos `seen` (the exporter's memory).
pub fn of_target(
    kind: &str,
    name: &str,
    writes: &[FieldWrite],
    missing: bool,
    seen: &[Undo],
    now: OffsetDateTime,
) -> Option<Writer> {
    let write = writers::foreign_write(writes, Owned::CaBundle, missing)?;
    let fight = writers::fight(seen, Some(&write), now);
    Some(Writer {
        kind: kind.to_string(),
        name: name.to_string(),
        write,
        fight,
    })
}

/// The other writer of one of certgen's ClusterTrustBundles (`name`, whose `managedFields` are
/// `writes`): another manager that wrote its `spec.trustBundle` after certgen did.
pub fn of_trust_bundle(name: &str, writes: &[FieldWrite], now: OffsetDateTime) -> Option<Writer> {
    let write = writers::foreign_write(writes, Owned::TrustBundle, false)?;
    let fight = writers::fight(&[], Some(&write), now);
    Some(Writer {
        kind: "ClusterTrustBundle".into(),
        name: name.to_string(),
        write,
        fight,
    })
}

/// The writer that removed the `caBundle` of target `kind name` between two versions a watch
/// saw (`before`, `after`: their `managedFields`): a removal leaves no owner, and the API
/// server drops certgen's entry with its last field, so the writer is the entry that is new
/// or whose time moved on (the newest), else `unknown` at `seen` (a writer that owns no field
/// of the object leaves no trace). `None` unless certgen owned a `caBundle` before.
pub fn of_removal(
    kind: &str,
    name: &str,
    (before, after): (&[FieldWrite], &[FieldWrite]),
    seen: OffsetDateTime,
) -> Option<Writer> {
    let owned_before = before
        .iter()
        .any(|w| w.manager == writers::CERTGEN && w.fields.iter().any(|f| f.ends_with("caBundle")));
    if !owned_before {
        return None;
    }
    let moved = after
        .iter()
        .filter(|w| w.manager != writers::CERTGEN)
        .filter(|w| {
            !before
                .iter()
                .any(|b| b.manager == w.manager && b.operation == w.operation && b.time >= w.time)
        })
        .max_by_key(|w| w.time);
    let (manager, operation, time) = match moved {
        Some(w) => (
            w.manager.clone(),
            w.operation.clone(),
            w.time.or(Some(seen)),
        ),
        None => ("unknown".into(), "Update".into(), Some(seen)),
    };
    let origin = if writers::is_cainjector(&manager) {
        writers::Origin::CaInjector
    } else {
        writers::Origin::Overwrote
    };
    Some(Writer {
        kind: kind.to_string(),
        name: name.to_string(),
        write: ForeignWrite {
            manager,
            operation,
            time,
            fields: vec!["caBundle".into()],
            removed: true,
            origin,
        },
        fight: None,
    })
}

/// The other writers of every Secret of `config` as `observed`, with the undos `seen`
/// elsewhere (by [`key`]).
pub fn of_snapshot(
    config: &Config,
    observed: &Snapshot,
    seen: &BTreeMap<String, Vec<Undo>>,
    now: OffsetDateTime,
) -> Vec<Writer> {
    config
        .secret_names()
        .into_iter()
        .filter_map(|name| {
            let s = observed.named(name, &config.ca.secret_name)?.present()?;
            let (keys, required) = keys_of(config, name);
            let seen = seen
                .get(&key("Secret", name))
                .map(Vec::as_slice)
                .unwrap_or_default();
            of_secret(s, (&keys, &required), seen, now)
        })
        .collect()
}

/// The value of [`writers::HISTORY`] a write of Secret `name` carries: the undos recorded on
/// it plus the one standing now, if any; `None` when there is nothing to record.
pub fn history_for_write(
    config: &Config,
    observed: &Snapshot,
    name: &str,
    now: OffsetDateTime,
) -> Option<String> {
    let s = observed.named(name, &config.ca.secret_name)?.present()?;
    let (keys, required) = keys_of(config, name);
    let current = of_secret(s, (&keys, &required), &[], now).map(|w| w.write);
    let value = writers::record(&recorded(s), current.as_ref(), now)?;
    (s.annotations.get(writers::HISTORY) != Some(&value)).then_some(value)
}

/// The annotation certgen sets on a `caBundle` target it writes: the SHA-256 of the bundle.
/// certgen's mark of the bundle it wrote: a field of its own that a writer removing the
/// `caBundle` leaves in place, so `managedFields` keep certgen's entry and its time, and the
/// writer that came after can be named.
pub const BUNDLE_ANNOTATION: &str = "certgen.dev/ca-bundle-sha256";

/// The annotations a write of `bundle` into the `caBundle` target `read` sets, judged at `now`
/// (the store's clock): certgen's mark of the bundle ([`BUNDLE_ANNOTATION`], when the bundle
/// is known: a dry run whose step would generate a CA does not know it yet), and the record
/// of undos ([`writers::HISTORY`]): those recorded on the target plus the one standing as
/// read, so that the next undo by the same manager is a fight for `check` too. The record is
/// left out when it would not change. Planned with the write, never decided by the adapter.
pub fn target_annotations(
    read: &crate::outside::TargetRead,
    bundle: Option<&[u8]>,
    now: OffsetDateTime,
) -> BTreeMap<String, String> {
    use sha2::{Digest, Sha256};
    let mut out = BTreeMap::new();
    if let Some(bundle) = bundle {
        out.insert(
            BUNDLE_ANNOTATION.to_string(),
            crate::pki::hex(&Sha256::digest(bundle)),
        );
    }
    let missing = read.bundles.iter().any(Vec::is_empty);
    let current = of_target(
        read.kind.as_str(),
        &read.name,
        &read.writes,
        missing,
        &[],
        now,
    );
    let earlier = writers::history(read.recorded.as_deref());
    if let Some(value) = writers::record(&earlier, current.map(|w| w.write).as_ref(), now)
        && read.recorded.as_deref() != Some(value.as_str())
    {
        out.insert(writers::HISTORY.to_string(), value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strip_is_put_on_the_entry_that_moved() {
        let t0 = time::macros::datetime!(2026-11-28 12:00 UTC);
        let hook = serde_json::json!({"f:webhooks": {"k:{\"name\":\"a\"}": {"f:clientConfig": {"f:caBundle": {}}}}});
        let stamp = serde_json::json!({"f:metadata": {"f:annotations": {"f:x": {}}}});
        let before = vec![
            FieldWrite::parse("helm", "Update", Some(t0), Some(&stamp)),
            FieldWrite::parse("tigera-operator", "Update", Some(t0), Some(&stamp)),
            FieldWrite::parse(
                "certgen",
                "Update",
                Some(t0 + time::Duration::minutes(1)),
                Some(&hook),
            ),
        ];
        let after = vec![
            FieldWrite::parse("helm", "Update", Some(t0), Some(&stamp)),
            FieldWrite::parse(
                "tigera-operator",
                "Update",
                Some(t0 + time::Duration::minutes(5)),
                Some(&stamp),
            ),
        ];
        let w = of_removal(
            "MutatingWebhookConfiguration",
            "hook",
            (&before, &after),
            t0,
        )
        .unwrap();
        assert_eq!(w.write.manager, "tigera-operator");
        assert!(w.write.removed);
        assert_eq!(w.write.origin, writers::Origin::Overwrote);
        // A writer that owns nothing leaves no trace: said as unknown, never guessed.
        let w = of_removal(
            "MutatingWebhookConfiguration",
            "hook",
            (&before, &before[..2]),
            t0,
        )
        .unwrap();
        assert_eq!(w.write.manager, "unknown");
        // certgen never owned it: nothing removed of certgen's.
        assert_eq!(
            of_removal(
                "MutatingWebhookConfiguration",
                "hook",
                (&before[..2], &after),
                t0
            ),
            None
        );
    }

    #[test]
    fn a_reverted_ca_secret_is_named_and_the_second_revert_is_a_fight() {
        let config = crate::config::test_profile(None);
        let now = time::macros::datetime!(2026-11-28 12:00 UTC);
        let ca = crate::pki::issue_ca(&config.ca.spec, now - time::Duration::DAY).unwrap();
        let mut observed =
            crate::observe::fixtures::installed(&config, &ca, now - time::Duration::DAY);
        let name = config.ca.secret_name.clone();
        let fields = serde_json::json!({"f:data": {"f:tls.crt": {}, "f:tls.key": {}}});
        observed.edit(&name, |ca| {
            ca.writes = vec![
                FieldWrite::parse(
                    "certgen",
                    "Update",
                    Some(now - time::Duration::hours(3)),
                    Some(&serde_json::json!({"f:data": {"f:ca.crt": {}}})),
                ),
                FieldWrite::parse(
                    "kustomize-controller",
                    "Apply",
                    Some(now - time::Duration::hours(1)),
                    Some(&fields),
                ),
            ]
        });
        let w = of_snapshot(&config, &observed, &BTreeMap::new(), now);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].name, config.ca.secret_name);
        assert_eq!(w[0].write.manager, "kustomize-controller");
        assert_eq!(w[0].fight, None);
        // certgen's next write of it records the undo.
        let value = history_for_write(&config, &observed, &config.ca.secret_name, now).unwrap();
        assert!(value.starts_with("kustomize-controller@"), "{value}");
        observed.edit(&name, |ca| {
            ca.annotations.insert(writers::HISTORY.into(), value);
            ca.writes[1].time = Some(now - time::Duration::minutes(5));
        });
        let w = of_snapshot(&config, &observed, &BTreeMap::new(), now);
        let fight = w[0].fight.as_ref().expect("a fight");
        assert_eq!(fight.manager, "kustomize-controller");
        assert!(w[0].text().contains("fighting"), "{}", w[0].text());
    }
}
