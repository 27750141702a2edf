//! The docs' cluster snippets (```` ```sh test=cluster ````) run as written on the test control
//! plane, file by file, in order: with `kubectl` and `helm` (the test environment's) and
//! `certgen` (the binary under test) on `PATH`, `KUBECONFIG` the admin's, and the namespaces
//! the docs name (`envoy-gateway-system`, and `kube-system` and `projectcontour` of the
//! migration guides) standing for a fresh one of the test's own, in the snippets, the outputs
//! they are compared with and `deploy/manifests/certgen.yaml`. README.md starts from nothing,
//! as a newcomer on a fresh cluster does (its `helm install` creates the namespace); the pages
//! under `docs/` find the namespace there, as their readers do. The kube-webhook-certgen guide
//! runs on kube-prometheus-stack's admission-webhook objects as its chart installs them
//! (`tests/it/fixtures/kube-prometheus-stack-admission.yaml`, through `kwc::install`): its
//! `monitoring` and release names (`kube-prometheus-stack…`) stand for the test's own, and its
//! `as=` snippets run as the chart's hook ServiceAccount, by impersonation. See the top-level
//! `doc_snippets` for the markers.

use std::path::Path;

use super::{cluster, helm, run_helm, testenv_bin};
use crate::doc_snippets::{Test, apply_command, bin_dir, doc_files, run, run_file, snippets};
use crate::util::{root, tempdir};

#[tokio::test(flavor = "multi_thread")]
async fn cluster_snippets_run_as_written() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let mut ran = Vec::new();
    for file in doc_files() {
        if !snippets(&file).iter().any(|s| s.test == Test::Cluster) {
            continue;
        }
        // A namespace of the test's own: README's snippets create it (`--create-namespace`),
        // the other pages' readers have it already. Deleted when the file is done.
        let kwc_guide = file == root().join("docs/migrating-from-kube-webhook-certgen.md");
        let mut chart = None;
        let (name, _ns) = if file == root().join("README.md") {
            let name = format!("docs-{}", certgen::pki::hex(&certgen::pki::random_bytes(3)));
            let guard = super::TestNs::new::<k8s_openapi::api::core::v1::Namespace>(&name);
            (name, Some(guard))
        } else if kwc_guide {
            // kube-prometheus-stack installed with its admission webhook: the configurations,
            // the hook ServiceAccount with the chart's Role and ClusterRole (the release's
            // fullname is the namespace's name). The install deletes them.
            // As long as `kube-prometheus-stack` (21 characters), so that the report's
            // columns, aligned on the longest Secret name, line up as the page shows them.
            let install = super::kwc::install(&c, "docs-kwc-guide", None).await;
            assert_eq!(install.ns.name.len(), "kube-prometheus-stack".len());
            let name = install.ns.name.clone();
            chart = Some(install);
            (name, None)
        } else {
            let ns = c.namespace("docs").await;
            (ns.name.clone(), Some(ns))
        };
        let dir = tempdir();
        let bin = bin_dir(dir.path());
        let helm_dir = helm.parent().unwrap_or(Path::new("/")).to_path_buf();
        let helm_home = dir.path().join(".helm");
        let env = [
            ("KUBECONFIG", c.kubeconfig.to_str().unwrap().to_string()),
            ("HELM_CONFIG_HOME", helm_home.to_str().unwrap().to_string()),
            ("HELM_CACHE_HOME", helm_home.to_str().unwrap().to_string()),
            ("HELM_DATA_HOME", helm_home.to_str().unwrap().to_string()),
        ];
        let swap = |s: &str| {
            let names: &[&str] = if kwc_guide {
                &["kube-prometheus-stack", "monitoring"]
            } else {
                &["envoy-gateway-system", "kube-system", "projectcontour"]
            };
            names
                .iter()
                .fold(s.to_string(), |s, ns| s.replace(ns, &name))
        };
        // `as=USER`: the admin's kubeconfig with the API server's impersonation of USER.
        let as_dir = dir.path().join(".as");
        let identity = |user: &str| {
            let kubeconfig = impersonating(&c.kubeconfig, user, &as_dir);
            vec![("KUBECONFIG", kubeconfig.to_str().unwrap().to_string())]
        };
        // The chart is run from the repository, as the docs' `deploy/helm/certgen` says; the
        // plain manifests are rendered for envoy-gateway-system, so they get the swap too.
        let deploy = dir.path().join("deploy");
        std::fs::create_dir_all(deploy.join("manifests")).unwrap();
        std::os::unix::fs::symlink(root().join("deploy/helm"), deploy.join("helm")).unwrap();
        let manifests =
            std::fs::read_to_string(root().join("deploy/manifests/certgen.yaml")).unwrap();
        std::fs::write(deploy.join("manifests/certgen.yaml"), swap(&manifests)).unwrap();

        let path = [bin, testenv_bin(), helm_dir];
        // The page's manifests go too when the file is done or a snippet failed
        // (cluster-scoped objects, Roles in other namespaces).
        let _manifests = OnDrop(|| {
            for s in snippets(&file).iter().filter(|s| s.test == Test::Apply) {
                let delete = apply_command(&swap(&s.code)).replacen(
                    "kubectl apply",
                    "kubectl delete --ignore-not-found",
                    1,
                );
                let snippet = crate::doc_snippets::Snippet {
                    code: delete,
                    identity: None,
                    ..s.clone()
                };
                run(&snippet, dir.path(), &path, &env);
            }
        });
        let file_ran = tokio::task::block_in_place(|| {
            run_file(
                &file,
                &Test::Cluster,
                dir.path(),
                &path,
                &env,
                &swap,
                &identity,
            )
        });
        ran.extend(file_ran);
        drop(chart);
        // What a page left installed goes with its namespace, cluster-scoped objects included
        // (the release's ClusterRole, its Roles in default and kube-node-lease).
        let kubeconfig = c.kubeconfig.to_str().unwrap();
        run_helm(
            &helm,
            &[
                "uninstall",
                "certgen",
                "--ignore-not-found",
                "--wait",
                "--kubeconfig",
                kubeconfig,
                "--namespace",
                &name,
            ],
        );
    }
    eprintln!("cluster doc snippets run ({}): {ran:?}", ran.len());
}

/// Runs its closure when dropped, also while a failed assertion unwinds.
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// A copy of `kubeconfig` whose users act as `user` (the API server's impersonation, which the
/// admin may use), in `dir`.
fn impersonating(kubeconfig: &Path, user: &str, dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let mut config: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    for u in config["users"].as_array_mut().unwrap() {
        u["user"]["as"] = serde_json::Value::String(user.to_string());
    }
    let path = dir.join(format!("{}.kubeconfig", user.replace(':', "_")));
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}
