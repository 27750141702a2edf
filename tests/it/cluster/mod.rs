//! Tests against a real control plane started by `tests/testenv/up` (it exports `KUBECONFIG`).
//!
//! Each test gets its own namespace, labelled `certgen.dev/test=true` so a leftover can be
//! found, and deleted when the test ends. Without `KUBECONFIG` these tests are skipped with a
//! note, except under `CI`, where an unreachable control plane fails the run.

mod chart;
mod consumers;
mod eg_compat;
mod faults;
mod harness;
mod list;
mod real_node;
mod rotation;
mod smoke;
mod store;
mod webhook;

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};

/// The label on every test namespace.
pub const TEST_LABEL: &str = "certgen.dev/test";

/// A connection to the test cluster.
pub struct Cluster {
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
}

/// The test cluster, or `None` (with a note) when none is configured outside CI.
pub async fn cluster() -> Option<Cluster> {
    let Some(kubeconfig) = std::env::var_os("KUBECONFIG").map(PathBuf::from) else {
        if std::env::var_os("CI").is_some() {
            panic!(
                "CI is set but KUBECONFIG is not: cluster tests must run (use the README's test command)"
            );
        }
        eprintln!(
            "note: KUBECONFIG is not set; skipping a cluster test (run tests/testenv/up first)"
        );
        return None;
    };
    let client = kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    // Fail loudly if the server is unreachable: a set KUBECONFIG means a cluster is expected.
    client.apiserver_version().await.unwrap_or_else(|e| {
        panic!(
            "the control plane at KUBECONFIG={} is unreachable: {e}",
            kubeconfig.display()
        )
    });
    Some(Cluster { client, kubeconfig })
}

/// A namespace that lives as long as the test.
pub struct TestNs {
    pub name: String,
}

impl Drop for TestNs {
    fn drop(&mut self) {
        // Drop cannot be async and runs inside the test's runtime: delete from a thread with a
        // runtime of its own, without waiting for finalizers.
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(client) = kube::Client::try_default().await {
                    let _ = Api::<Namespace>::all(client)
                        .delete(&name, &Default::default())
                        .await;
                }
            });
        })
        .join();
    }
}

impl Cluster {
    /// Creates a fresh, labelled namespace.
    pub async fn namespace(&self, prefix: &str) -> TestNs {
        let suffix = certgen::pki::hex(&certgen::pki::random_bytes(3));
        let name = format!("{prefix}-{suffix}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    TEST_LABEL.to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        TestNs { name }
    }

    /// Secrets in a namespace.
    pub fn secrets(&self, ns: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Mints a kubeconfig for a new ServiceAccount bound to a Role with `rules` in `ns`,
    /// authenticated by a TokenRequest token, so certgen runs with exactly those permissions.
    pub async fn service_account_kubeconfig(
        &self,
        ns: &str,
        name: &str,
        rules: Vec<PolicyRule>,
    ) -> PathBuf {
        let pp = PostParams::default();
        let meta = |n: &str| ObjectMeta {
            name: Some(n.to_string()),
            namespace: Some(ns.to_string()),
            ..Default::default()
        };
        let sas: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        sas.create(
            &pp,
            &ServiceAccount {
                metadata: meta(name),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        Api::<Role>::namespaced(self.client.clone(), ns)
            .create(
                &pp,
                &Role {
                    metadata: meta(name),
                    rules: Some(rules),
                },
            )
            .await
            .unwrap();
        Api::<RoleBinding>::namespaced(self.client.clone(), ns)
            .create(
                &pp,
                &RoleBinding {
                    metadata: meta(name),
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "Role".into(),
                        name: name.into(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: name.into(),
                        namespace: Some(ns.into()),
                        ..Default::default()
                    }]),
                },
            )
            .await
            .unwrap();
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let token: TokenRequest = sas
            .create_subresource("token", name, &pp, &request)
            .await
            .unwrap();
        let token = token.status.expect("TokenRequest status").token;

        // Server and CA come from the admin kubeconfig.
        let admin = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let cluster = admin.clusters[0].cluster.clone().unwrap();
        let server = cluster.server.unwrap();
        let ca = cluster.certificate_authority_data.unwrap_or_else(|| {
            use base64_ca::encode;
            encode(&std::fs::read(cluster.certificate_authority.unwrap()).unwrap())
        });
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: test\n    user: {name}\n    namespace: {ns}\ncurrent-context: {name}\n"
        );
        let dir = std::env::temp_dir().join(format!("certgen-test-{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, text).unwrap();
        path
    }
}

mod base64_ca {
    pub fn encode(bytes: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }
}

/// A RBAC rule.
pub fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}
