//! certgen as kube-webhook-certgen, without a cluster: the link's command line, and bad input
//! refused before the first request (exit 2 naming the flag). The kubeconfig points at a
//! closed port on 127.0.0.1, so a run that made a request would fail differently (exit 5). The
//! same commands against the real API server are in `cluster::kwc`.

use std::path::Path;

use crate::util::{Run, command, tempdir, write};

/// certgen linked as `dir/kube-webhook-certgen`, run with `args` and a kubeconfig whose
/// server nobody listens on.
fn kwc(dir: &Path, args: &[&str]) -> Run {
    let link = dir.join("kube-webhook-certgen");
    if !link.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_certgen"), &link).unwrap();
    }
    let kubeconfig = write(
        dir,
        "closed.kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    );
    Run::of(
        command(&link)
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig),
    )
}

#[test]
fn bad_input_is_refused_before_any_request() {
    let t = tempdir();
    let cases: &[(&[&str], &str)] = &[
        (
            &["create", "--secret-name=s", "--namespace=ns"],
            "--host: is required",
        ),
        (
            &["create", "--host=a,,b", "--secret-name=s", "--namespace=ns"],
            "--host: \"a,,b\" has an empty entry",
        ),
        (
            &["create", "--host=a", "--secret-name=s"],
            "--namespace: is required",
        ),
        (
            &[
                "patch",
                "--secret-name=s",
                "--namespace=ns",
                "--webhook-name=w",
                "--patch-failure-policy=Maybe",
            ],
            "--patch-failure-policy: \"Maybe\" is not a failure policy",
        ),
        (
            &[
                "patch",
                "--secret-name=s",
                "--namespace=ns",
                "--webhook-name=w",
                "--patch-mode=apply",
            ],
            "--patch-mode: \"apply\" is not a patch mode",
        ),
        (
            &["patch", "--secret-name=s", "--namespace=ns"],
            "--webhook-name: is required",
        ),
        (
            &["serve"],
            "invoked as kube-webhook-certgen: only `create`, `patch` and `version`",
        ),
        (&[], "invoked as kube-webhook-certgen: give a command"),
    ];
    for (args, expect) in cases {
        let run = kwc(t.path(), args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expect), "{args:?}: {}", run.stderr);
    }
    // A valid command does reach the (closed) server: exit 5, so the cases above made no
    // request.
    let run = kwc(
        t.path(),
        &["create", "--host=a", "--secret-name=s", "--namespace=ns"],
    );
    assert_eq!(run.code, 5, "{}", run.stderr);
}

#[test]
fn global_flags_go_before_or_after_the_command() {
    let t = tempdir();
    for args in [
        &[
            "--log-level",
            "debug",
            "--log-format=json",
            "create",
            "--secret-name=s",
            "--namespace=ns",
        ][..],
        &[
            "create",
            "--log-level=debug",
            "--secret-name=s",
            "--namespace=ns",
        ],
    ] {
        let run = kwc(t.path(), args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("--host: is required"), "{}", run.stderr);
    }
    let run = kwc(t.path(), &["version"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("certgen "), "{}", run.stdout);
}
