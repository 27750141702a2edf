use serde_json::json;
use time::macros::datetime;

use super::*;

const KEYS: &[&str] = &["ca.crt", "tls.crt", "tls.key"];

fn w(manager: &str, op: &str, at: OffsetDateTime, fields: serde_json::Value) -> FieldWrite {
    FieldWrite::parse(manager, op, Some(at), Some(&fields))
}

fn data(keys: &[&str]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert(".".into(), json!({}));
    for k in keys {
        m.insert(format!("f:{k}"), json!({}));
    }
    json!({ "f:data": m, "f:metadata": { "f:labels": { ".": {}, "f:app.kubernetes.io/managed-by": {} } } })
}

#[test]
fn parse_keeps_leaves_without_prefixes() {
    let hook = json!({"f:webhooks": {"k:{\"name\":\"a.b\"}": {".": {}, "f:clientConfig": {"f:caBundle": {}}, "f:name": {}}}});
    let e = w("x", "Update", datetime!(2026-11-28 10:00 UTC), hook);
    assert_eq!(
        e.fields.iter().collect::<Vec<_>>(),
        [
            "webhooks/k:{\"name\":\"a.b\"}/clientConfig/caBundle",
            "webhooks/k:{\"name\":\"a.b\"}/name"
        ]
    );
    let s = w(
        "x",
        "Update",
        datetime!(2026-11-28 10:00 UTC),
        data(&["ca.crt"]),
    );
    assert!(s.fields.contains("data/ca.crt"));
    assert!(
        s.fields
            .contains("metadata/labels/app.kubernetes.io/managed-by")
    );
}

#[test]
fn certgen_owning_its_fields_names_nobody() {
    let writes = [
        w(
            "certgen",
            "Update",
            datetime!(2026-11-28 10:00 UTC),
            data(KEYS),
        ),
        w(
            "kubectl-edit",
            "Update",
            datetime!(2026-11-28 11:00 UTC),
            json!({"f:metadata": {"f:labels": {"f:x": {}}}}),
        ),
    ];
    assert_eq!(foreign_write(&writes, Owned::SecretData(KEYS), false), None);
}

#[test]
fn a_later_write_of_certgens_fields_is_an_overwrite() {
    let writes = [
        w(
            "certgen",
            "Update",
            datetime!(2026-11-28 10:00 UTC),
            data(&["tls.crt", "tls.key"]),
        ),
        w(
            "kustomize-controller",
            "Apply",
            datetime!(2026-11-28 11:00 UTC),
            data(&["ca.crt"]),
        ),
    ];
    let f = foreign_write(&writes, Owned::SecretData(KEYS), false).unwrap();
    assert_eq!(f.manager, "kustomize-controller");
    assert_eq!(f.operation, "Apply");
    assert_eq!(f.origin, Origin::Overwrote);
    assert_eq!(f.fields, ["data/ca.crt"]);
    assert!(f.to_string().contains("after certgen's last write"), "{f}");
}

#[test]
fn shared_ownership_of_the_same_value_is_no_overwrite() {
    // An apply of the value certgen wrote leaves both owning it.
    let writes = [
        w(
            "certgen",
            "Update",
            datetime!(2026-11-28 10:00 UTC),
            data(KEYS),
        ),
        w(
            "kustomize-controller",
            "Apply",
            datetime!(2026-11-28 11:00 UTC),
            data(&["ca.crt"]),
        ),
    ];
    assert_eq!(foreign_write(&writes, Owned::SecretData(KEYS), false), None);
}

#[test]
fn before_adoption_and_the_ca_injector_are_named_as_such() {
    let writes = [
        w(
            "envoy-gateway-certgen",
            "Update",
            datetime!(2026-11-01 10:00 UTC),
            data(KEYS),
        ),
        w(
            "certgen",
            "Update",
            datetime!(2026-11-28 10:00 UTC),
            json!({"f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}}}}),
        ),
    ];
    let f = foreign_write(&writes, Owned::SecretData(KEYS), false).unwrap();
    assert_eq!(f.origin, Origin::BeforeAdoption);
    assert!(f.to_string().contains("before certgen adopted it"), "{f}");
    // Never written by certgen at all.
    let f = foreign_write(&writes[..1], Owned::SecretData(KEYS), false).unwrap();
    assert_eq!(f.origin, Origin::BeforeAdoption);
    let hook =
        json!({"f:webhooks": {"k:{\"name\":\"a\"}": {"f:clientConfig": {"f:caBundle": {}}}}});
    let writes = [
        w(
            "certgen",
            "Update",
            datetime!(2026-11-01 10:00 UTC),
            json!({"f:metadata": {"f:labels": {"f:x": {}}}}),
        ),
        w(
            "cainjector",
            "Update",
            datetime!(2026-11-28 10:00 UTC),
            hook,
        ),
    ];
    let f = foreign_write(&writes, Owned::CaBundle, false).unwrap();
    assert_eq!(f.origin, Origin::CaInjector);
    assert!(f.to_string().contains("cert-manager's CA injector"), "{f}");
    // cert-manager 1.20's injector writes as `cert-manager-cainjector` (seen on v1.20.3).
    let mut writes = writes;
    writes[1].manager = "cert-manager-cainjector".into();
    let f = foreign_write(&writes, Owned::CaBundle, false).unwrap();
    assert_eq!(f.origin, Origin::CaInjector);
}

#[test]
fn a_removal_is_put_on_the_newest_write_after_certgens() {
    let writes = [
        w(
            "certgen",
            "Update",
            datetime!(2026-11-28 10:00 UTC),
            json!({"f:metadata": {"f:labels": {"f:x": {}}}}),
        ),
        w(
            "operator",
            "Update",
            datetime!(2026-11-28 10:05 UTC),
            json!({"f:webhooks": {}}),
        ),
        w(
            "helm",
            "Update",
            datetime!(2026-11-27 10:05 UTC),
            json!({"f:webhooks": {}}),
        ),
    ];
    let f = foreign_write(&writes, Owned::CaBundle, true).unwrap();
    assert_eq!((f.manager.as_str(), f.removed), ("operator", true));
    // Not missing: nothing to say.
    assert_eq!(foreign_write(&writes, Owned::CaBundle, false), None);
}

#[test]
fn two_undos_by_the_same_manager_within_a_day_are_a_fight() {
    let now = datetime!(2026-11-28 12:00 UTC);
    let current = ForeignWrite {
        manager: "argocd-controller".into(),
        operation: "Update".into(),
        time: Some(datetime!(2026-11-28 11:00 UTC)),
        fields: vec!["data/ca.crt".into()],
        removed: false,
        origin: Origin::Overwrote,
    };
    // The first undo: recorded, no fight.
    assert_eq!(fight(&[], Some(&current), now), None);
    let recorded = record(&[], Some(&current), now).unwrap();
    assert_eq!(recorded, "argocd-controller@2026-11-28T11:00:00Z");
    let earlier = history(Some(&recorded));
    // The same undo seen again is still one.
    assert_eq!(fight(&earlier, Some(&current), now), None);
    // A second undo: a fight, naming the manager.
    let second = ForeignWrite {
        time: Some(datetime!(2026-11-28 11:30 UTC)),
        ..current.clone()
    };
    let f = fight(&earlier, Some(&second), now).unwrap();
    assert_eq!(f.manager, "argocd-controller");
    assert_eq!(f.undos.len(), 2);
    // Another manager's earlier undo does not count; nor one older than a day.
    let other = history(Some(
        "kustomize-controller@2026-11-28T10:00:00Z,argocd-controller@2026-11-27T10:00:00Z",
    ));
    assert_eq!(fight(&other, Some(&second), now), None);
    // certgen has its fields back: no fight, whatever the history.
    assert_eq!(fight(&earlier, None, now), None);
    // A write from before adoption is no undo.
    let adopted = ForeignWrite {
        origin: Origin::BeforeAdoption,
        ..second.clone()
    };
    assert_eq!(fight(&earlier, Some(&adopted), now), None);
}

#[test]
fn the_record_is_bounded_and_forgets_after_a_day() {
    let now = datetime!(2026-11-28 12:00 UTC);
    let many: Vec<Undo> = (0..20)
        .map(|i| Undo {
            at: now - time::Duration::minutes(i),
            manager: "m".into(),
        })
        .collect();
    let r = record(&many, None, now).unwrap();
    assert_eq!(r.split(',').count(), HISTORY_MAX);
    let old = [Undo {
        at: now - time::Duration::days(2),
        manager: "m".into(),
    }];
    assert_eq!(record(&old, None, now).as_deref(), Some(""));
    assert_eq!(record(&[], None, now), None);
}
