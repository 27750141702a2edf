//! The docs' cluster snippets (```` ```sh test=cluster ````) run as written on the test control
//! plane, file by file, in order: with `kubectl` and `helm` (the test environment's) and
//! `certgen` (the binary under test) on `PATH`, `KUBECONFIG` the admin's, and the namespaces
//! the docs name (`envoy-gateway-system`, and `kube-system` and `projectcontour` of the
//! migration guides) standing for a fresh one of the test's own, in the snippets, the outputs
//! they are compared with and `deploy/manifests/certgen.yaml`. README.md starts from nothing,
//! as a newcomer on a fresh cluster does (its `helm install` creates the namespace); the pages
//! under `docs/` find the namespace there, as their readers do. See the top-level
//! `doc_snippets` for the markers.

use std::path::Path;

use super::{cluster, helm, run_helm, testenv_bin};
use crate::doc_snippets::{Test, bin_dir, doc_files, run_file, snippets};
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
        let (name, _ns) = if file == root().join("README.md") {
            let name = format!("docs-{}", certgen::pki::hex(&certgen::pki::random_bytes(3)));
            let guard = super::TestNs::new::<k8s_openapi::api::core::v1::Namespace>(&name);
            (name, guard)
        } else {
            let ns = c.namespace("docs").await;
            (ns.name.clone(), ns)
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
            ["envoy-gateway-system", "kube-system", "projectcontour"]
                .iter()
                .fold(s.to_string(), |s, ns| s.replace(ns, &name))
        };
        // The chart is run from the repository, as the docs' `deploy/helm/certgen` says; the
        // plain manifests are rendered for envoy-gateway-system, so they get the swap too.
        let deploy = dir.path().join("deploy");
        std::fs::create_dir_all(deploy.join("manifests")).unwrap();
        std::os::unix::fs::symlink(root().join("deploy/helm"), deploy.join("helm")).unwrap();
        let manifests =
            std::fs::read_to_string(root().join("deploy/manifests/certgen.yaml")).unwrap();
        std::fs::write(deploy.join("manifests/certgen.yaml"), swap(&manifests)).unwrap();

        let file_ran = tokio::task::block_in_place(|| {
            run_file(
                &file,
                &Test::Cluster,
                dir.path(),
                &[bin, testenv_bin(), helm_dir],
                &env,
                &swap,
            )
        });
        ran.extend(file_ran);
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
