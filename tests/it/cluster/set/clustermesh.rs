//! The `cilium-clustermesh` profile over the set of three control planes, as a ClusterMesh
//! operator runs it (docs/multicluster.md): the clusters already share a `cilium-ca` copied by
//! hand (Opaque, `ca.crt` and `ca.key`, the same bytes in every cluster), each runs the
//! `clustermesh-apiserver` Deployment and the `cilium` DaemonSet, and one config lists the
//! clusters with their Cilium `cluster.name`.
//!
//! The first run over the set adopts the shared CA without a gap (the same CA, still in
//! Cilium's layout, signs every member's leaves, each with its own cluster's names); an
//! `--overwrite` over the set then rotates it in stages while watches record every member's
//! Secrets: at every instant they saw, every leaf any member holds verifies (rustls-webpki, for
//! its own usage) against every bundle any member holds, no leaf changes before every member's
//! bundles hold the new CA, and `cilium-ca` keeps Cilium's layout (`ca.crt` one certificate,
//! the active CA); the clustermesh-apiserver is restarted in every member, the agents are not.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;

use super::spec::run_within;
use super::{Recorder, Seen, Set};
use crate::cluster::{data_map, deployment, kinds::daemon_set};
use crate::util::trust::{Use, fingerprints, webpki_verifies_for};

/// The shared CA Secret, in Cilium's layout.
const CA: &str = "cilium-ca";

/// Cilium's `cluster.name` of each member.
const NAMES: [(&str, &str); 3] = [("m0", "mesh-0"), ("m1", "mesh-1"), ("m2", "mesh-2")];

/// The profile's TLS Secrets, and whether each is verified as a server, a client, or both.
const LEAVES: &[(&str, Use)] = &[
    ("clustermesh-apiserver-server-cert", Use::Server),
    ("clustermesh-apiserver-admin-cert", Use::Client),
    ("clustermesh-apiserver-remote-cert", Use::Client),
    ("clustermesh-apiserver-local-cert", Use::Client),
    ("hubble-server-certs", Use::Both),
    ("hubble-relay-client-certs", Use::Client),
    ("hubble-relay-server-certs", Use::Server),
    ("hubble-metrics-server-certs", Use::Server),
    ("hubble-ui-client-certs", Use::Client),
];

/// rustls-webpki's verdict on the leaf `leaf` (PEM) against the bundle `bundle`, for its use.
fn trusts(bundle: &[u8], leaf: &[u8], used: Use) -> Result<(), String> {
    let cas = certgen::pki::parse_cert_chain(bundle).map_err(|e| e.to_string())?;
    let leaf = certgen::pki::parse_cert_chain(leaf).map_err(|e| e.to_string())?;
    webpki_verifies_for(&leaf[0], &cas, rustls_pki_types::UnixTime::now(), used)
}

/// Each member's Secrets' data, by member and Secret.
type Mesh = BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<u8>>>>;

async fn read_mesh(set: &Set, ns: &str) -> Mesh {
    let mut out = Mesh::new();
    for m in &set.members {
        let api: Api<Secret> = m.secrets(ns);
        let mut secrets = BTreeMap::new();
        for name in LEAVES.iter().map(|(n, _)| *n).chain([CA]) {
            if let Some(s) = api.get_opt(name).await.unwrap() {
                secrets.insert(name.to_string(), data_map(s));
            }
        }
        out.insert(m.context.to_string(), secrets);
    }
    out
}

/// Every cross-member pair (and every pair within a member) at one instant: each leaf that
/// any member holds against each bundle that any member holds. Members without every leaf yet
/// are skipped. Returns the failures.
fn pairs(mesh: &Mesh) -> Vec<String> {
    let complete = |s: &BTreeMap<String, BTreeMap<String, Vec<u8>>>| {
        LEAVES
            .iter()
            .all(|(n, _)| s.get(*n).is_some_and(|d| d.contains_key("tls.crt")))
    };
    let mut failures = Vec::new();
    for (lm, ls) in mesh.iter().filter(|(_, s)| complete(s)) {
        for (bm, bs) in mesh.iter().filter(|(_, s)| complete(s)) {
            for (leaf, used) in LEAVES {
                for (bundle, _) in LEAVES {
                    if let Err(e) = trusts(&bs[*bundle]["ca.crt"], &ls[*leaf]["tls.crt"], *used) {
                        failures.push(format!(
                            "{lm}'s {leaf} is refused by {bm}'s {bundle} bundle: {e}"
                        ));
                    }
                }
            }
        }
    }
    failures
}

/// `cilium-ca` in Cilium's layout in every member: one CA certificate in `ca.crt` (returned,
/// the same in every member), its key in `ca.key`, nothing of `tls.*`.
fn cilium_layout(mesh: &Mesh) -> String {
    let mut active = Vec::new();
    for (m, s) in mesh {
        let ca = &s[CA];
        assert!(
            !ca.contains_key("tls.crt") && !ca.contains_key("tls.key"),
            "{m}: {CA} holds certgen's own keys: {:?}",
            ca.keys()
        );
        let certs = fingerprints(&ca["ca.crt"]);
        assert_eq!(certs.len(), 1, "{m}: {CA} ca.crt holds one CA");
        let key = certgen::pki::CaKey::from_pem(
            certgen::pki::parse_single_cert(&ca["ca.crt"]).unwrap(),
            &ca["ca.key"],
        );
        assert!(key.is_ok(), "{m}: ca.key is not the key of ca.crt");
        active.push(certs[0].clone());
    }
    assert!(
        active.windows(2).all(|w| w[0] == w[1]),
        "one shared CA: {active:?}"
    );
    active[0].clone()
}

/// The clusters' shared `cilium-ca`, made the way Cilium's certgen makes it, in Cilium's
/// layout.
fn shared_ca() -> Secret {
    let spec = certgen::pki::CaSpec {
        common_name: "Cilium CA".into(),
        validity: Duration::from_secs(1095 * 86_400),
        key_algorithm: certgen::pki::KeyAlgorithm::EcdsaP256,
    };
    let (_, ca) = certgen::pki::issue_ca(&spec, time::OffsetDateTime::now_utc()).unwrap();
    Secret {
        metadata: ObjectMeta {
            name: Some(CA.into()),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            (
                "ca.crt".to_string(),
                k8s_openapi::ByteString(ca.cert.pem().into_bytes()),
            ),
            (
                "ca.key".to_string(),
                k8s_openapi::ByteString(ca.key.expose().as_bytes().to_vec()),
            ),
        ])),
        ..Default::default()
    }
}

/// The clustermesh-apiserver Deployment and the agents' DaemonSet (`cilium`) in `ns` of `m`,
/// as Cilium's chart installs them (kwok runs their pods).
async fn mesh_workloads(m: &super::Member, ns: &str) {
    let pp = PostParams::default();
    Api::<Deployment>::namespaced(m.client.clone(), ns)
        .create(&pp, &deployment("clustermesh-apiserver", 1, json!({})))
        .await
        .unwrap();
    Api::<DaemonSet>::namespaced(m.client.clone(), ns)
        .create(&pp, &daemon_set("cilium", json!({})))
        .await
        .unwrap();
}

/// The restartedAt annotation of `name`'s pod template (a Deployment or a DaemonSet).
fn restarted_at(template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>) -> Option<String> {
    template?
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get("kubectl.kubernetes.io/restartedAt")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shared_cilium_ca_is_adopted_then_rotated_in_stages_over_the_mesh() {
    let Some(set) = Set::get().await else { return };
    let ns = set.namespace("mesh").await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mesh.yaml");
    let mut yaml = crate::util::run(&["profile", "show", "cilium-clustermesh"])
        .ok()
        .stdout;
    yaml.push_str("clusters:\n");
    for (context, name) in NAMES {
        yaml.push_str(&format!("  - context: {context}\n    name: {name}\n"));
    }
    std::fs::write(&config, yaml).unwrap();
    let shared = shared_ca();
    for m in &set.members {
        let pp = PostParams::default();
        m.secrets(&ns.name).create(&pp, &shared).await.unwrap();
        mesh_workloads(m, &ns.name).await;
    }
    let certgen = |extra: &[&str]| {
        set.certgen_in(&ns.name, &[])
            .args(["--config", config.to_str().unwrap(), "--no-poke", "-q"])
            .propagation_delay("3s")
            .args(extra)
            .command()
    };

    // Adopted: the shared CA signs every member's leaves, each with its own cluster's names.
    let r = run_within(certgen(&["--timeout", "60s"]), Duration::from_secs(120)).await;
    assert_eq!(r.code, 0, "adoption over the set: {}", r.stderr);
    let mesh = read_mesh(&set, &ns.name).await;
    let old = cilium_layout(&mesh);
    assert_eq!(
        old,
        fingerprints(&shared.data.as_ref().unwrap()["ca.crt"].0)[0],
        "the shared CA was adopted as it is"
    );
    let failures = pairs(&mesh);
    assert!(failures.is_empty(), "after adoption: {failures:#?}");
    for (context, name) in NAMES {
        let admin = certgen::pki::parse_cert_chain(
            &mesh[context]["clustermesh-apiserver-admin-cert"]["tls.crt"],
        )
        .unwrap();
        assert_eq!(admin[0].subject, format!("CN=admin-{name}"), "{context}");
        let hubble =
            certgen::pki::parse_cert_chain(&mesh[context]["hubble-server-certs"]["tls.crt"])
                .unwrap();
        assert_eq!(
            hubble[0].dns_names,
            [format!("*.{name}.hubble-grpc.cilium.io")],
            "{context}"
        );
    }
    let leaves_before: BTreeMap<(String, String), Vec<u8>> = mesh
        .iter()
        .flat_map(|(m, s)| {
            LEAVES
                .iter()
                .map(move |(n, _)| ((m.clone(), n.to_string()), s[*n]["tls.crt"].clone()))
        })
        .collect();
    let agents_before = {
        let mut out = Vec::new();
        for m in &set.members {
            let ds = Api::<DaemonSet>::namespaced(m.client.clone(), &ns.name)
                .get("cilium")
                .await
                .unwrap();
            out.push(restarted_at(ds.spec.as_ref().map(|s| &s.template)));
        }
        out
    };

    // A staged rotation over the mesh, watched.
    let recorder = Recorder::start(&set, &ns.name).await;
    let r = run_within(
        certgen(&["--overwrite", "--timeout", "120s"]),
        Duration::from_secs(240),
    )
    .await;
    let seen = recorder.stop();
    assert_eq!(r.code, 0, "--overwrite over the set: {}", r.stderr);
    let mesh = read_mesh(&set, &ns.name).await;
    let new = cilium_layout(&mesh);
    assert_ne!(new, old, "rotated");
    assert!(pairs(&mesh).is_empty(), "after: {:#?}", pairs(&mesh));
    for (m, s) in &mesh {
        assert!(
            !s[CA].contains_key("next.crt"),
            "{m}: the pending CA was promoted"
        );
    }

    // Every instant the watches saw.
    let mut now = Mesh::new();
    let mut violations = Vec::new();
    let mut trusted_everywhere = false;
    let ours = |s: &Seen| s.secret == CA || LEAVES.iter().any(|(n, _)| *n == s.secret);
    for s in seen.iter().filter(|s| ours(s)) {
        now.entry(s.member.clone())
            .or_default()
            .insert(s.secret.clone(), s.data.clone());
        if let Some(f) = pairs(&now).into_iter().next() {
            violations.push(format!("at {:?} ({} {}): {f}", s.at, s.member, s.secret));
        }
        if let Some(c) = now
            .get(&s.member)
            .and_then(|m| m.get(CA))
            .and_then(|ca| ca.get("ca.crt"))
            && fingerprints(c).len() != 1
        {
            violations.push(format!(
                "{}: {CA} ca.crt holds {} certificates",
                s.member,
                fingerprints(c).len()
            ));
        }
        let leaf_changed = LEAVES.iter().any(|(n, _)| {
            *n == s.secret
                && s.data.get("tls.crt") != leaves_before.get(&(s.member.clone(), n.to_string()))
        });
        trusted_everywhere = trusted_everywhere
            || (now.len() == 3
                && now.values().all(|m| {
                    LEAVES.iter().all(|(n, _)| {
                        m.get(*n)
                            .and_then(|d| d.get("ca.crt"))
                            .is_some_and(|b| fingerprints(b).contains(&new))
                    })
                }));
        if leaf_changed && !trusted_everywhere {
            violations.push(format!(
                "at {:?}: {}'s {} changed before every member's bundles held the new CA",
                s.at, s.member, s.secret
            ));
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");

    // The clustermesh-apiserver restarted in every member (its etcd reads its CA once); the
    // agents, which read their files at each connection, were not.
    for (i, m) in set.members.iter().enumerate() {
        let d = Api::<Deployment>::namespaced(m.client.clone(), &ns.name)
            .get("clustermesh-apiserver")
            .await
            .unwrap();
        assert!(
            restarted_at(d.spec.as_ref().map(|s| &s.template)).is_some(),
            "{}: clustermesh-apiserver was not restarted",
            m.context
        );
        let ds = Api::<DaemonSet>::namespaced(m.client.clone(), &ns.name)
            .get("cilium")
            .await
            .unwrap();
        assert_eq!(
            restarted_at(ds.spec.as_ref().map(|s| &s.template)),
            agents_before[i],
            "{}: the agents were restarted",
            m.context
        );
    }

    // `check` over the mesh: healthy.
    let c = set
        .certgen_in(&ns.name, &[])
        .check()
        .args(["--config", config.to_str().unwrap()])
        .run();
    assert_eq!(c.code, 0, "check over the mesh: {}{}", c.stdout, c.stderr);
    // One member's own check (its exporter reports the same): it names the set its CA Secret
    // records, and is healthy with nothing due.
    let prom = crate::util::Run::of(
        crate::util::certgen()
            .args(["check", "--kubeconfig"])
            .arg(&set.kubeconfig)
            .args(["--context", "m1", "-n", &ns.name, "--config"])
            .arg(&config)
            .args(["--output", "prometheus"]),
    );
    assert_eq!(prom.code, 0, "{}{}", prom.stdout, prom.stderr);
    let info = prom
        .stdout
        .lines()
        .find(|l| l.starts_with("certgen_set_info{"))
        .unwrap_or_else(|| panic!("no certgen_set_info:\n{}", prom.stdout));
    assert!(
        info.contains("generation=\"1\"") && info.contains("members=\"3\"") && info.ends_with(" 1"),
        "{info}"
    );
    eprintln!(
        "clustermesh: {} Secret versions watched over 3 members; CA {old} -> {new}",
        seen.len()
    );
}

/// The ClusterMesh walk-through of docs/multicluster.md (its ```` ```sh test=set ```` blocks),
/// run as written over the three control planes, each output compared with the page: the
/// namespace `kube-system` stands for a fresh one of the test's own in every member (the
/// snippets' `-n kube-system` and the reports' `namespace kube-system`, and `CERTGEN_NAMESPACE`
/// for the profile's), and the page starts
/// where a mesh does: Cilium made `cilium-ca` in m0 (here, made the way its certgen makes it),
/// and every member runs the clustermesh-apiserver and the agents.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_clustermesh_walk_through_runs_as_written() {
    use crate::doc_snippets::{Test, bin_dir, run_file};
    let Some(set) = Set::get().await else { return };
    let ns = set.namespace("docs-mesh").await;
    let pp = PostParams::default();
    set.member("m0")
        .secrets(&ns.name)
        .create(&pp, &shared_ca())
        .await
        .unwrap();
    for m in &set.members {
        mesh_workloads(m, &ns.name).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = bin_dir(dir.path());
    let env = [
        ("KUBECONFIG", set.kubeconfig.to_str().unwrap().to_string()),
        ("CERTGEN_NAMESPACE", ns.name.clone()),
    ];
    let name = ns.name.clone();
    // The namespace, not the `kube-system` whose UID names a member.
    let swap = move |s: &str| {
        s.replace("-n kube-system", &format!("-n {name}"))
            .replace("namespace kube-system", &format!("namespace {name}"))
    };
    let ran = tokio::task::block_in_place(|| {
        run_file(
            &crate::util::root().join("docs/multicluster.md"),
            &Test::Set,
            dir.path(),
            &[bin, crate::cluster::testenv_bin()],
            &env,
            &swap,
            &|user| panic!("as={user} is for cluster snippets"),
        )
    });
    assert_eq!(ran.len(), 4, "the walk-through's snippets: {ran:?}");
    // What the page claims at its end: one new CA, in Cilium's layout, in every member.
    let mesh = read_mesh(&set, &ns.name).await;
    cilium_layout(&mesh);
    assert!(pairs(&mesh).is_empty(), "{:#?}", pairs(&mesh));
    eprintln!(
        "clustermesh walk-through snippets run ({}): {ran:?}",
        ran.len()
    );
}
