//! The docs' cluster snippets (```` ```sh test=cluster ````) run as written on the test control
//! plane, file by file, in order: with `kubectl` and `helm` (the test environment's) and
//! `certgen` (the binary under test) on `PATH`, `KUBECONFIG` the admin's, and the namespace
//! `envoy-gateway-system` standing for a fresh one of the test's own (in the snippets and in
//! the outputs they are compared with). See the top-level `doc_snippets` for the markers.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{cluster, helm};
use crate::doc_snippets::{Test, bin_dir, doc_files, run_file, snippets};
use crate::util::{root, tempdir};

/// The test environment's bin directory (kubectl).
fn testenv_bin() -> PathBuf {
    let out = Command::new(root().join("tests/testenv/build"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "tests/testenv/build failed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().lines().last().unwrap().trim())
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_snippets_run_as_written() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let mut ran = Vec::new();
    for file in doc_files() {
        if !snippets(&file).iter().any(|s| s.test == Test::Cluster) {
            continue;
        }
        // A namespace name of the test's own, which the snippets create themselves.
        let name = format!(
            "docs-{}",
            certgen::pki::hex(&certgen::pki::random_bytes(3))
        );
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
        // The chart is run from the repository, as the docs' `deploy/helm/certgen` says.
        std::os::unix::fs::symlink(root().join("deploy"), dir.path().join("deploy")).unwrap();
        let file_ran = tokio::task::block_in_place(|| {
            run_file(
                &file,
                &Test::Cluster,
                dir.path(),
                &[bin, testenv_bin(), helm_dir],
                &env,
                &|s| s.replace("envoy-gateway-system", &name),
            )
        });
        ran.extend(file_ran);
    }
    eprintln!("cluster doc snippets run ({}): {ran:?}", ran.len());
}
