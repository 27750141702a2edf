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
        // Issue 32, finding 7: keys the API server (`..data`) or the local layout (`.x`)
        // refuses after the CA Secret was written, and SANs no TLS client matches.
        (
            &[
                "create",
                "--host=a",
                "--secret-name=s",
                "--namespace=ns",
                "--key-name=..data",
            ],
            "--key-name: \"..data\" is not a valid Secret key: it must not start with '.'",
        ),
        (
            &[
                "create",
                "--host=a",
                "--secret-name=s",
                "--namespace=ns",
                "--ca-name=.ca",
            ],
            "--ca-name: \".ca\" is not a valid Secret key",
        ),
        (
            &["create", "--host=*", "--secret-name=s", "--namespace=ns"],
            "--host: \"*\" is neither an IP address nor a DNS name a TLS client can match",
        ),
        (
            &[
                "create",
                "--host=svc,*.*.ns",
                "--secret-name=s",
                "--namespace=ns",
            ],
            "--host: \"*.*.ns\" is neither an IP address nor a DNS name",
        ),
        (
            &[
                "create",
                "--host=svc_1.ns",
                "--secret-name=s",
                "--namespace=ns",
            ],
            "--host: \"svc_1.ns\" is neither an IP address nor a DNS name",
        ),
        (
            &[
                "create",
                "--host=010.0.0.1",
                "--secret-name=s",
                "--namespace=ns",
            ],
            "--host: \"010.0.0.1\" is neither an IP address nor a DNS name",
        ),
    ];
    for (args, expect) in cases {
        let run = kwc(t.path(), args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expect), "{args:?}: {}", run.stderr);
    }
    // A valid command does reach the (closed) server: exit 5, so the cases above made no
    // request. So does a --secret-name of 253 characters (valid, though NAME-ca would not be;
    // it is only derived for a renewal, which needs a --webhook-name), and a wildcard the
    // config's dnsNames accept too (Envoy Gateway's own `*.{namespace}`).
    let long = format!("--secret-name={}", "a".repeat(253));
    for args in [
        &["create", "--host=a", "--secret-name=s", "--namespace=ns"][..],
        &["create", "--host=a", &long, "--namespace=ns"],
        &["create", "--host=*.ns", "--secret-name=s", "--namespace=ns"],
    ] {
        let run = kwc(t.path(), args);
        assert_eq!(run.code, 5, "{args:?}: {}", run.stderr);
    }
    let run = kwc(
        t.path(),
        &[
            "create",
            "--host=a",
            &long,
            "--namespace=ns",
            "--webhook-name=w",
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("--ca-secret-name: is needed"),
        "{}",
        run.stderr
    );
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
