//! The Helm chart and plain manifests: rendered, applied with real RBAC, and run against.
//!
//! The chart is rendered by a real `helm` (built from Go modules by `tests/testenv/build-helm`,
//! cached like the control plane). The checked-in plain manifests must be exactly the chart
//! rendered with its defaults; regenerate them with
//! `CERTGEN_UPDATE_DOCS=1 cargo test --test it cluster::chart`. On the control plane, certgen
//! runs with the arguments of the rendered Job and CronJob, as a ServiceAccount bound to exactly
//! the rendered Role, through install, a no-op and a rotation; without one verb of that Role it
//! exits 5 naming what is missing; and Helm itself installs, upgrades and uninstalls the chart
//! in a namespace that enforces the restricted Pod Security Standard. When helm cannot be built
//! (no `go`), these tests are skipped with a note, except under `CI`, where that fails the run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{
    Certgen, Cluster, chart_dir, cluster, deployment, generation, helm, rolled_out, run_helm,
};
use crate::util::{Run, check_generated, consumer, root, tempdir};

/// The release name the plain manifests are rendered with.
const RELEASE: &str = "certgen";
/// The namespace the plain manifests are rendered for: the envoy-gateway profile's.
const MANIFESTS_NAMESPACE: &str = "envoy-gateway-system";
const MANIFESTS_HEADER: &str = "\
# certgen, as plain manifests: deploy/helm/certgen rendered with its default values by
#   helm template certgen deploy/helm/certgen --namespace envoy-gateway-system
# for clusters without Helm. Do not edit: regenerate with
#   CERTGEN_UPDATE_DOCS=1 cargo test --test it cluster::chart
#
# kubectl apply -f deploy/manifests/certgen.yaml    (the namespace must exist)
# creates, in envoy-gateway-system: a Job that runs certgen once and a CronJob that runs it
# daily to renew what is due, each with its own ServiceAccount (certgen-hook, certgen) and a
# least-privilege Role and RoleBinding; cluster-wide: a ClusterRole and ClusterRoleBinding per
# ServiceAccount, limited by name to the topology injector's webhook configuration (its
# caBundle); in default: a Role and RoleBinding per ServiceAccount to record Events about that
# webhook configuration; in kube-node-lease: a Role and RoleBinding per ServiceAccount to read
# the kubelets' heartbeat Leases. The helm.sh/hook annotations only matter to Helm. A Job
# cannot be changed in place: to run certgen again by hand, `kubectl delete job certgen -n
# envoy-gateway-system` and apply again. `kubectl delete -f deploy/manifests/certgen.yaml`
# removes all of it (not the Secrets). For another namespace or schedule, render the chart
# with your values.
";

/// `helm template` of the chart as release `certgen` in `ns`, with `extra` arguments.
pub(super) fn template(helm: &Path, ns: &str, extra: &[&str]) -> String {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        ns,
    ];
    args.extend(extra);
    run_helm(helm, &args)
}

/// The documents of a multi-document YAML stream, as JSON values.
pub(super) fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("helm's output does not parse ({e}):\n{yaml}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The one rendered object of `kind` the hook Job's run uses (its ServiceAccount, Role, ...),
/// or the only one of a kind that has no identity (Job, CronJob).
pub(super) fn object<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == kind && !for_cluster_events(d) && !of_release(d))
        .collect();
    assert_eq!(found.len(), 1, "expected one {kind} in {docs:#?}");
    found[0]
}

/// The one rendered object of `kind` of the release's own identity (the CronJob's), which
/// `helm uninstall` deletes.
pub(super) fn release_object<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == kind && !for_cluster_events(d) && of_release(d))
        .collect();
    assert_eq!(found.len(), 1, "expected one release {kind} in {docs:#?}");
    found[0]
}

/// Whether `d` belongs to the release's identity (the CronJob's), not the hook Job's.
fn of_release(d: &Value) -> bool {
    d["metadata"]["labels"]["app.kubernetes.io/component"] == "release"
}

/// Whether `d` is the Role (or its binding) in `default` that lets certgen record the Events of
/// cluster-scoped objects (the topology injector's caBundle writes), or the one in
/// `kube-node-lease` that lets it read the kubelets' heartbeats: [`object`] leaves them aside,
/// [`cluster_events_role`] and [`kubelets_role`] check them.
fn for_cluster_events(d: &Value) -> bool {
    matches!(d["kind"].as_str(), Some("Role" | "RoleBinding"))
        && matches!(
            d["metadata"]["namespace"].as_str(),
            Some("default" | "kube-node-lease")
        )
}

/// The Role in `kube-node-lease`, checked: `get` on leases only (every node's, since node names
/// are not known at install), bound to certgen's ServiceAccount in `sa_namespace`.
fn kubelets_role(docs: &[Value], sa_namespace: &str) {
    let in_lease_ns = |d: &&Value| d["metadata"]["namespace"] == "kube-node-lease";
    let role = docs
        .iter()
        .filter(in_lease_ns)
        .find(|d| d["kind"] == "Role" && !of_release(d))
        .expect("a Role in kube-node-lease");
    let g = grants(&rules(role));
    let expected: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::from([(
        ("coordination.k8s.io".into(), "leases".into(), "get".into()),
        vec!["*".to_string()],
    )]);
    assert_eq!(g, expected, "get on the node Leases, nothing else");
    let binding = docs
        .iter()
        .filter(in_lease_ns)
        .find(|d| d["kind"] == "RoleBinding" && !of_release(d))
        .expect("the kubelets' Role is bound");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], sa_namespace);
}

/// The Role in `default` for the Events of cluster-scoped objects, checked: events only, bound
/// to certgen's ServiceAccount in `sa_namespace`; `None` when the chart rendered none.
fn cluster_events_role(docs: &[Value], sa_namespace: &str) -> Option<()> {
    let role = docs.iter().find(|d| {
        d["kind"] == "Role"
            && for_cluster_events(d)
            && d["metadata"]["namespace"] == "default"
            && !of_release(d)
    })?;
    let g = grants(&rules(role));
    let expected: BTreeMap<(String, String, String), Vec<String>> = ["get", "create", "patch"]
        .iter()
        .map(|v| {
            (
                ("events.k8s.io".into(), "events".into(), v.to_string()),
                vec!["*".to_string()],
            )
        })
        .collect();
    assert_eq!(g, expected, "events only, nothing else in default");
    let binding = docs
        .iter()
        .find(|d| {
            d["kind"] == "RoleBinding"
                && for_cluster_events(d)
                && d["metadata"]["namespace"] == "default"
                && !of_release(d)
        })
        .expect("the events Role is bound");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], sa_namespace);
    assert_eq!(hook_weight(role), hook_weight(object(docs, "Role")));
    Some(())
}

/// The pod spec of a Job or a CronJob.
fn pod_spec(workload: &Value) -> &Value {
    match workload["kind"].as_str() {
        Some("Job") => &workload["spec"]["template"]["spec"],
        Some("CronJob") => &workload["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        Some("Deployment") => &workload["spec"]["template"]["spec"],
        other => panic!("not a workload: {other:?}"),
    }
}

/// The certgen container's arguments.
fn args(workload: &Value) -> Vec<String> {
    let containers = pod_spec(workload)["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    serde_json::from_value(containers[0]["args"].clone()).unwrap()
}

/// A hook's weight, checked to be a pre-install/pre-upgrade hook that Helm deletes once the hook
/// has run (the Job itself stays for its logs until the next hook replaces it).
fn hook_weight(obj: &Value) -> i64 {
    let a = &obj["metadata"]["annotations"];
    assert_eq!(
        a["helm.sh/hook"], "pre-install,pre-upgrade",
        "{} is a pre-install/pre-upgrade hook",
        obj["kind"]
    );
    let policy = if obj["kind"] == "Job" {
        "before-hook-creation"
    } else {
        "before-hook-creation,hook-succeeded"
    };
    assert_eq!(a["helm.sh/hook-delete-policy"], policy, "{}", obj["kind"]);
    a["helm.sh/hook-weight"]
        .as_str()
        .unwrap_or_else(|| panic!("{} has a hook weight", obj["kind"]))
        .parse()
        .unwrap()
}

/// The secure defaults every certgen pod must have.
fn assert_secure(workload: &Value) {
    let spec = pod_spec(workload);
    let kind = &workload["kind"];
    assert_eq!(
        spec["automountServiceAccountToken"], true,
        "{kind}: the API token is needed"
    );
    let pod = &spec["securityContext"];
    assert_eq!(pod["runAsNonRoot"], true, "{kind}");
    assert_eq!(pod["runAsUser"], 65532, "{kind}");
    assert_eq!(pod["seccompProfile"]["type"], "RuntimeDefault", "{kind}");
    let c = &spec["containers"][0]["securityContext"];
    assert_eq!(c["runAsNonRoot"], true, "{kind}");
    assert_eq!(c["runAsUser"], 65532, "{kind}");
    assert_eq!(c["readOnlyRootFilesystem"], true, "{kind}");
    assert_eq!(c["allowPrivilegeEscalation"], false, "{kind}");
    assert_eq!(c["capabilities"]["drop"], json!(["ALL"]), "{kind}");
    assert!(c["capabilities"].get("add").is_none(), "{kind}");
    assert_eq!(c["seccompProfile"]["type"], "RuntimeDefault", "{kind}");
    if kind != "Deployment" {
        assert_eq!(spec["restartPolicy"], "Never", "{kind}");
    }
}

pub(super) fn rules(role: &Value) -> Vec<PolicyRule> {
    serde_json::from_value(role["rules"].clone()).expect("the Role's rules are PolicyRules")
}

/// Which (group, resource, verb) the rules allow, and for which names (`*`: any).
fn grants(rules: &[PolicyRule]) -> BTreeMap<(String, String, String), Vec<String>> {
    let mut out: BTreeMap<_, Vec<String>> = BTreeMap::new();
    for r in rules {
        let names = r.resource_names.clone().unwrap_or_else(|| vec!["*".into()]);
        for g in r.api_groups.as_deref().unwrap_or_default() {
            for res in r.resources.as_deref().unwrap_or_default() {
                for v in &r.verbs {
                    out.entry((g.clone(), res.clone(), v.clone()))
                        .or_default()
                        .extend(names.iter().cloned());
                }
            }
        }
    }
    out
}

/// `--set profile=NAME` alone gives a Role that reaches exactly that built-in profile's CA
/// Secret and Secrets (the chart keeps its own list of each profile's names), and an unknown
/// profile without `secretNames` is refused at render time.
/// `clusterName` reaches every certgen the chart runs as `--cluster-name` (a ClusterMesh
/// member's hook Job, CronJob and exporter name its own cluster in its leaves), and is left out
/// when empty.
#[test]
fn the_cluster_name_reaches_the_job_the_cronjob_and_the_exporter() {
    let Some(helm) = helm() else { return };
    let named = |docs: &[Value], kind: &str| {
        let a = args(object(docs, kind));
        a.windows(2)
            .any(|w| w[0] == "--cluster-name" && w[1] == "mesh-1")
    };
    let docs = documents(&template(
        &helm,
        "kube-system",
        &[
            "--set",
            "profile=cilium-clustermesh",
            "--set",
            "clusterName=mesh-1",
            "--set",
            "metrics.enabled=true",
        ],
    ));
    for kind in ["Job", "CronJob", "Deployment"] {
        assert!(
            named(&docs, kind),
            "{kind}: {:?}",
            args(object(&docs, kind))
        );
    }
    let docs = documents(&template(&helm, "ops", &["--set", "metrics.enabled=true"]));
    for kind in ["Job", "CronJob", "Deployment"] {
        assert!(
            !args(object(&docs, kind)).contains(&"--cluster-name".to_string()),
            "{kind}"
        );
    }
}

/// The chart's `renewalWindows` and `renewalWindowMargin` reach the hook Job, the CronJob and
/// the exporter as `--renewal-window "CRON;DURATION;TZ"` (UTC when no time zone is given) and
/// `--renewal-window-margin`, in a form certgen itself accepts; none without them, and a window
/// without its cron is refused at render time.
#[test]
fn renewal_windows_reach_the_job_the_cronjob_and_the_exporter() {
    let Some(helm) = helm() else { return };
    let tmp = tempdir();
    let values = tmp.path().join("windows.yaml");
    std::fs::write(
        &values,
        "renewalWindows:\n  - cron: \"0 2 * * 2\"\n    windowDuration: 4h\n    timezone: Europe/Berlin\n  - cron: \"30 1 * * *\"\n    windowDuration: 2h\nrenewalWindowMargin: 48h\nmetrics:\n  enabled: true\n",
    )
    .unwrap();
    let docs = documents(&template(
        &helm,
        "ops",
        &["--values", values.to_str().unwrap()],
    ));
    let expected: Vec<String> = [
        "--renewal-window",
        "0 2 * * 2;4h;Europe/Berlin",
        "--renewal-window",
        "30 1 * * *;2h;UTC",
        "--renewal-window-margin",
        "48h",
    ]
    .map(String::from)
    .to_vec();
    for kind in ["Job", "CronJob", "Deployment"] {
        let a = args(object(&docs, kind));
        let windows: Vec<String> = a
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                a[*i].starts_with("--renewal-window")
                    || (*i > 0 && a[i - 1].starts_with("--renewal-window"))
            })
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(windows, expected, "{kind}: {a:?}");
    }
    // certgen takes the rendered arguments as they are (a dry run in local mode).
    let dir = tmp.path().join("certs");
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    let dry = crate::util::run_local(&dir, &[&["--dry-run"], &expected[..]].concat()).ok();
    let window = &dry.json()["renewalWindow"];
    assert!(window.is_object(), "{}", dry.stdout);

    // Without windows: no flag at all.
    let docs = documents(&template(&helm, "ops", &["--set", "metrics.enabled=true"]));
    for kind in ["Job", "CronJob", "Deployment"] {
        assert!(
            !args(object(&docs, kind))
                .iter()
                .any(|a| a.starts_with("--renewal-window")),
            "{kind}"
        );
    }

    // A window without its cron: helm refuses to render, naming the value.
    std::fs::write(&values, "renewalWindows:\n  - windowDuration: 4h\n").unwrap();
    let home = std::env::temp_dir().join("certgen-test-helm");
    let out = Command::new(&helm)
        .args([
            "template",
            RELEASE,
            chart_dir().to_str().unwrap(),
            "--namespace",
            "ops",
        ])
        .args(["--values", values.to_str().unwrap()])
        .env("HELM_CONFIG_HOME", &home)
        .env("HELM_CACHE_HOME", &home)
        .env("HELM_DATA_HOME", &home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("renewalWindows[].cron is required"),
        "{stderr}"
    );
}

#[test]
fn the_role_names_each_builtin_profiles_secrets() {
    let Some(helm) = helm() else { return };
    for name in certgen::profiles::NAMES {
        let profile: Value =
            serde_saphyr::from_str(certgen::profiles::builtin(name).unwrap()).unwrap();
        let mut expected = vec![profile["ca"]["secretName"].as_str().unwrap().to_string()];
        for s in profile["secrets"].as_array().unwrap() {
            expected.push(s["name"].as_str().unwrap().to_string());
        }
        let docs = documents(&template(
            &helm,
            "ops",
            &["--set", &format!("profile={name}")],
        ));
        let g = grants(&rules(object(&docs, "Role")));
        assert_eq!(
            g[&("".to_string(), "secrets".to_string(), "get".to_string())],
            expected,
            "profile {name}"
        );
        // caBundle targets: the topology injector is Envoy Gateway's; another profile gets no
        // ClusterRole (nothing cluster-scoped to write) and no Role in default. (One per
        // identity: the hook Job's and the CronJob's.)
        let cluster_roles = docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" && !of_release(d))
            .count();
        let events_role = cluster_events_role(&docs, "ops").is_some();
        let injector = *name == "envoy-gateway";
        assert_eq!(
            (cluster_roles, events_role),
            (usize::from(injector), injector),
            "profile {name}"
        );
    }
    let out = Command::new(&helm)
        .args(["template", RELEASE, chart_dir().to_str().unwrap()])
        .args(["--set", "profile=nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("set secretNames"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn with_a_config_the_cluster_role_covers_exactly_its_ca_bundle_targets() {
    let Some(helm) = helm() else { return };
    let profile = crate::util::run(&["profile", "show"]).ok().stdout;
    let config = profile.replace(
        "webhooks:\n",
        "webhooks:\n  - kind: ValidatingWebhookConfiguration\n    name: policy.{namespace}\n    caBundleFrom: envoy\n  - kind: APIService\n    name: v1.metrics.example.com\n    caBundleFrom: envoy\n",
    );
    assert_ne!(config, profile);
    let tmp = tempdir();
    let file = tmp.path().join("config.yaml");
    std::fs::write(&file, &config).unwrap();
    let set_file = format!("config={}", file.display());
    let grants_of = |extra: &[&str]| {
        let args = [&["--set-file", set_file.as_str()][..], extra].concat();
        let docs = documents(&template(&helm, "ops", &args));
        let role = docs.iter().find(|d| d["kind"] == "ClusterRole").cloned();
        (
            role.map(|r| grants(&rules(&r))),
            cluster_events_role(&docs, "ops").is_some(),
        )
    };
    let (g, events) = grants_of(&[]);
    let g = g.expect("a ClusterRole for the targets");
    let names = |group: &str, resource: &str, verb: &str| {
        g[&(group.to_string(), resource.to_string(), verb.to_string())].clone()
    };
    for verb in ["get", "update"] {
        assert_eq!(
            names(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                verb
            ),
            ["envoy-gateway-topology-injector.ops"]
        );
        assert_eq!(
            names(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                verb
            ),
            ["policy.ops"]
        );
        assert_eq!(
            names("apiregistration.k8s.io", "apiservices", verb),
            ["v1.metrics.example.com"]
        );
    }
    assert_eq!(g.len(), 6, "nothing more: {g:?}");
    assert!(events, "their Events are recorded in default");
    // topologyInjector=false leaves the injector out, not the config's other targets.
    let (g, _) = grants_of(&["--set", "topologyInjector=false"]);
    let g = g.unwrap();
    assert_eq!(g.len(), 4, "{g:?}");
    assert!(
        g.keys()
            .all(|(_, resource, _)| resource != "mutatingwebhookconfigurations")
    );
}

/// `rules` without `verb` on `resource`.
pub(super) fn without(rules: &[PolicyRule], resource: &str, verb: &str) -> Vec<PolicyRule> {
    let mut removed = false;
    let out: Vec<PolicyRule> = rules
        .iter()
        .cloned()
        .filter_map(|mut r| {
            if r.resources
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|x| x == resource)
            {
                let before = r.verbs.len();
                r.verbs.retain(|v| v != verb);
                removed |= r.verbs.len() != before;
            }
            (!r.verbs.is_empty()).then_some(r)
        })
        .collect();
    assert!(removed, "the Role has no {verb} on {resource}");
    out
}

#[test]
fn the_plain_manifests_are_the_chart_rendered_with_its_defaults() {
    let Some(helm) = helm() else { return };
    let chart = chart_dir();
    let lint = run_helm(&helm, &["lint", "--strict", chart.to_str().unwrap()]);
    assert!(lint.contains("0 chart(s) failed"), "{lint}");

    let generated = format!(
        "{MANIFESTS_HEADER}{}",
        template(&helm, MANIFESTS_NAMESPACE, &[])
    );
    check_generated(
        &root().join("deploy/manifests/certgen.yaml"),
        &generated,
        "cluster::chart",
    );
    // What the manifests hold, for people who read them rather than the chart.
    let docs = documents(&generated);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    let identity = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
    ];
    assert_eq!(
        kinds,
        [&identity[..], &["CronJob"], &identity[..], &["Job"]].concat(),
        "the CronJob is on by default: a hook alone renews only on upgrades; the hook Job and \
         the CronJob each have their identity; the ClusterRole lets certgen keep the topology \
         injector's caBundle in step, the Roles in default record its Events and in \
         kube-node-lease read the kubelets' heartbeats"
    );
    assert!(
        docs.iter()
            .filter(|d| !d["kind"].as_str().unwrap().starts_with("Cluster"))
            .filter(|d| !for_cluster_events(d))
            .all(|d| d["metadata"]["namespace"] == MANIFESTS_NAMESPACE),
        "every namespaced object names its namespace, so `kubectl apply -f` needs no -n"
    );
    assert!(cluster_events_role(&docs, MANIFESTS_NAMESPACE).is_some());
    kubelets_role(&docs, MANIFESTS_NAMESPACE);
    let webhooks = object(&docs, "ClusterRole");
    assert_eq!(
        webhooks["rules"],
        serde_json::json!([{
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": [format!("envoy-gateway-topology-injector.{MANIFESTS_NAMESPACE}")],
            "verbs": ["get", "update"]
        }]),
        "limited by name to the injector"
    );
}

#[test]
fn the_chart_renders_ordered_hooks_secure_pods_and_a_role_limited_by_name() {
    let Some(helm) = helm() else { return };
    let docs = documents(&template(
        &helm,
        "ops",
        &[
            "--set",
            "cronJob.enabled=true",
            "--set",
            "cronJob.schedule=0 */6 * * *",
        ],
    ));

    // Hooks: ServiceAccount, then Role, then RoleBinding, then the Job; the CronJob is an
    // ordinary release resource. The ClusterRole and its binding go with the Role's.
    let weights: Vec<i64> = ["ServiceAccount", "Role", "RoleBinding", "Job"]
        .iter()
        .map(|k| hook_weight(object(&docs, k)))
        .collect();
    assert!(weights.windows(2).all(|w| w[0] < w[1]), "{weights:?}");
    assert_eq!(
        hook_weight(object(&docs, "ClusterRole")),
        hook_weight(object(&docs, "Role"))
    );
    assert_eq!(
        hook_weight(object(&docs, "ClusterRoleBinding")),
        hook_weight(object(&docs, "RoleBinding"))
    );
    let cron = object(&docs, "CronJob");
    assert!(
        cron["metadata"]["annotations"]
            .get("helm.sh/hook")
            .is_none()
    );
    assert_eq!(cron["spec"]["schedule"], "0 */6 * * *");
    assert_eq!(cron["spec"]["concurrencyPolicy"], "Forbid");

    let job = object(&docs, "Job");
    // Two identities with the same rights: the hook Job's (hooks, gone once the hook has run)
    // and the CronJob's (release objects, which helm uninstall deletes).
    assert_eq!(
        pod_spec(job)["serviceAccountName"],
        object(&docs, "ServiceAccount")["metadata"]["name"]
    );
    assert_eq!(
        pod_spec(cron)["serviceAccountName"],
        release_object(&docs, "ServiceAccount")["metadata"]["name"]
    );
    assert_ne!(
        pod_spec(job)["serviceAccountName"],
        pod_spec(cron)["serviceAccountName"]
    );
    for kind in [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    ] {
        let (hook, release) = (object(&docs, kind), release_object(&docs, kind));
        assert!(
            release["metadata"]["annotations"]
                .get("helm.sh/hook")
                .is_none(),
            "the release's {kind} is no hook"
        );
        assert_eq!(hook["rules"], release["rules"], "{kind}: the same rights");
        assert_eq!(
            hook["roleRef"]["kind"], release["roleRef"]["kind"],
            "{kind}"
        );
    }
    for kind in ["RoleBinding", "ClusterRoleBinding"] {
        assert_eq!(
            release_object(&docs, kind)["subjects"][0]["name"],
            pod_spec(cron)["serviceAccountName"]
        );
        assert_eq!(
            release_object(&docs, kind)["roleRef"]["name"],
            release_object(&docs, &kind.replace("Binding", ""))["metadata"]["name"]
        );
    }
    for w in [job, cron] {
        assert_secure(w);
        let a = args(w);
        for (flag, value) in [
            ("--namespace", "ops"),
            ("--profile", "envoy-gateway"),
            ("--timeout", "4m"),
        ] {
            let i = a
                .iter()
                .position(|x| x == flag)
                .unwrap_or_else(|| panic!("{a:?}"));
            assert_eq!(a[i + 1], value, "{a:?}");
        }
        assert!(a.contains(&"--wait".to_string()), "{a:?}");
        assert!(!a.contains(&"--probe".to_string()), "{a:?}");
        // Periodic runs renew what is due; they never rotate by themselves.
        assert!(!a.contains(&"--overwrite".to_string()), "{a:?}");
    }

    // The Role: get/patch and the lock's get/update/delete by name, create unrestricted (RBAC
    // cannot restrict create by name), and nothing else.
    let role = object(&docs, "Role");
    let g = grants(&rules(role));
    let names = |group: &str, resource: &str, verb: &str| {
        let mut n = g
            .get(&(group.to_string(), resource.to_string(), verb.to_string()))
            .unwrap_or_else(|| panic!("no {verb} on {resource}: {g:?}"))
            .clone();
        n.sort();
        n
    };
    let mut secrets = vec![
        "envoy",
        "envoy-gateway",
        "envoy-gateway-ca",
        "envoy-oidc-hmac",
        "envoy-rate-limit",
    ];
    secrets.sort();
    assert_eq!(names("", "secrets", "get"), secrets);
    assert_eq!(names("", "secrets", "patch"), secrets);
    assert_eq!(names("", "secrets", "create"), ["*"]);
    for verb in ["get", "update", "delete"] {
        assert_eq!(
            names("coordination.k8s.io", "leases", verb),
            ["envoy-gateway-certgen-lock"]
        );
    }
    assert_eq!(names("coordination.k8s.io", "leases", "create"), ["*"]);
    for verb in ["get", "list", "watch", "patch"] {
        assert_eq!(names("apps", "deployments", verb), ["*"]);
    }
    assert_eq!(names("", "services", "get"), ["*"]);
    assert_eq!(names("discovery.k8s.io", "endpointslices", "list"), ["*"]);
    for verb in ["get", "create", "patch"] {
        assert_eq!(names("events.k8s.io", "events", verb), ["*"]);
    }
    // Pushed propagation: find the pods that mount a changed Secret and annotate them.
    for verb in ["list", "patch"] {
        assert_eq!(names("", "pods", verb), ["*"]);
    }
    // Beside cert-manager: whether the Certificate a Secret's annotation names still exists.
    assert_eq!(names("cert-manager.io", "certificates", "get"), ["*"]);
    assert_eq!(
        g.len(),
        3 + 4 + 4 + 1 + 1 + 3 + 2 + 1,
        "nothing more: {g:?}"
    );
    let binding = object(&docs, "RoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["namespace"], "ops");
    // The topology injector's Events are kept in default: a Role there for events only, and
    // none without --events or without the injector.
    assert!(cluster_events_role(&docs, "ops").is_some());
    for off in ["events=false", "topologyInjector=false"] {
        let docs = documents(&template(&helm, "ops", &["--set", off]));
        assert!(
            cluster_events_role(&docs, "ops").is_none(),
            "{off}: no Role in default"
        );
    }

    // A config: mounted from a ConfigMap and passed with --config; the Role's names and the
    // Lease come from it; the Secrets' namespace may differ from the release's.
    let profile = crate::util::run(&["profile", "show"]).ok().stdout;
    let config = profile
        .replace("name: envoy-gateway\n", "name: my-platform\n")
        .replace("secretName: envoy-gateway-ca", "secretName: my-platform-ca");
    assert_ne!(config, profile);
    let tmp = tempdir();
    let config_file = tmp.path().join("config.yaml");
    std::fs::write(&config_file, &config).unwrap();
    let docs = documents(&template(
        &helm,
        "ops",
        &[
            "--set-file",
            &format!("config={}", config_file.display()),
            "--set",
            "namespace=platform",
            "--set",
            "probe=true",
            "--set",
            "job.extraArgs={--overwrite}",
        ],
    ));
    let cm = object(&docs, "ConfigMap");
    assert_eq!(
        cm["data"]["config.yaml"].as_str().unwrap().trim(),
        config.trim()
    );
    assert!(hook_weight(cm) < hook_weight(object(&docs, "Job")));
    let job = object(&docs, "Job");
    let a = args(job);
    let i = a.iter().position(|x| x == "--config").unwrap();
    assert_eq!(a[i + 1], "/etc/certgen/config.yaml");
    assert!(!a.contains(&"--profile".to_string()), "{a:?}");
    assert!(a.contains(&"--probe".to_string()), "{a:?}");
    assert_eq!(a.last().unwrap(), "--overwrite", "{a:?}");
    let mounts = &pod_spec(job)["containers"][0]["volumeMounts"];
    assert!(
        mounts
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == "/etc/certgen" && m["readOnly"] == true),
        "{mounts}"
    );
    let role = object(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "platform");
    assert_eq!(
        object(&docs, "RoleBinding")["metadata"]["namespace"],
        "platform"
    );
    assert_eq!(
        object(&docs, "ServiceAccount")["metadata"]["namespace"],
        "ops"
    );
    let g = grants(&rules(role));
    assert!(g[&(String::new(), "secrets".into(), "get".into())].contains(&"my-platform-ca".into()));
    assert_eq!(
        g[&("coordination.k8s.io".into(), "leases".into(), "get".into())],
        ["my-platform-certgen-lock"]
    );

    // A config that does not parse is refused at render time.
    let chart = chart_dir();
    let out = Command::new(&helm)
        .args(["template", RELEASE, chart.to_str().unwrap()])
        .args(["--set-string", "config=a: ["])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("config is not valid YAML"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ------------------------------------------------------------------------ on the cluster

/// A pod from a rendered workload's template, for a dry-run create.
fn pod_of(workload: &Value, name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": pod_spec(workload),
    }))
    .unwrap()
}

/// certgen with a workload's rendered arguments, as the identity in `kubeconfig`.
fn certgen_as(kubeconfig: &Path, rendered: &[String]) -> Certgen {
    Certgen::new(kubeconfig).args(rendered)
}

/// The envoy-gateway profile's restart-only consumer, running (kwok plays its pods; it passes
/// the restricted Pod Security Standard the test namespace enforces).
async fn ratelimit_deployment(c: &Cluster, ns: &str) -> Api<Deployment> {
    let secure = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    let spec = json!({"template": {"spec": {"containers": [{
        "name": "app",
        "image": "fake.invalid/app:1",
        "securityContext": secure,
    }]}}});
    let api = c
        .create_deployment(ns, &deployment("envoy-ratelimit", 2, spec))
        .await;
    rolled_out(&api, "envoy-ratelimit", Duration::from_secs(120)).await;
    api
}

/// Asserts a run failed with exit 5 for lack of `verb` on `resource` in `ns`, and said so.
pub(super) fn assert_forbidden(r: &Run, verb: &str, resource: &str, ns: &str) {
    assert_eq!(r.code, 5, "without {verb} on {resource}: {}", r.stderr);
    for word in [verb, resource, ns, "403"] {
        assert!(
            r.stderr.contains(word),
            "{word:?} missing (without {verb} on {resource}) from: {}",
            r.stderr
        );
    }
    assert!(
        r.stderr
            .contains(&format!("grant the {verb} verb on {resource}")),
        "{}",
        r.stderr
    );
}

/// The actions on consumer `name`'s Deployments in a run's report, each rollout done.
fn consumer_actions(report: &Value, name: &str) -> Vec<String> {
    consumer(report, name)["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["rollout"], "done", "{report}");
            d["action"].as_str().unwrap().to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn certgen_runs_with_exactly_the_rendered_role_and_fails_clearly_without_a_verb() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("chart").await;
    let rendered = template(&helm, &ns.name, &["--set", "cronJob.enabled=true"]);
    let docs = documents(&rendered);

    // The API server takes every rendered object as it is (strict field validation).
    let (ok, out) = c.kubectl_stdin(
        &[
            "create",
            "--dry-run=server",
            "--validate=strict",
            "-o",
            "name",
        ],
        &rendered,
    );
    assert!(ok, "the API server refused the rendered chart:\n{out}");

    // The pods pass the "restricted" Pod Security Standard, enforced by the API server.
    let namespaces: Api<Namespace> = Api::all(c.client.clone());
    namespaces
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}})),
        )
        .await
        .unwrap();
    // Both identities' ServiceAccounts: the Job's pod runs as the hook's, the CronJob's as the
    // release's.
    for sa in [
        object(&docs, "ServiceAccount"),
        release_object(&docs, "ServiceAccount"),
    ] {
        let sa: ServiceAccount = serde_json::from_value(sa.clone()).unwrap();
        Api::<ServiceAccount>::namespaced(c.client.clone(), &ns.name)
            .create(&PostParams::default(), &sa)
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &ns.name);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    for kind in ["Job", "CronJob"] {
        let w = object(&docs, kind);
        assert_secure(w);
        let pod = pod_of(w, &format!("pss-{}", kind.to_lowercase()));
        if let Err(e) = pods.create(&dry, &pod).await {
            panic!("the {kind}'s pod is refused under the restricted Pod Security Standard: {e}");
        }
    }
    // The control: the same pod allowed to escalate privileges is refused, so the check above
    // is real.
    let mut weak = object(&docs, "Job").clone();
    weak["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
        json!(true);
    let err = pods
        .create(&dry, &pod_of(&weak, "pss-weak"))
        .await
        .expect_err("PodSecurity admission refuses allowPrivilegeEscalation: true");
    assert!(
        err.to_string().contains("allowPrivilegeEscalation"),
        "{err}"
    );

    // A restart-only consumer that is running.
    let deployments = ratelimit_deployment(&c, &ns.name).await;

    // certgen as a ServiceAccount bound to exactly the rendered Role.
    let role = object(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], ns.name.as_str());
    let rules = rules(role);
    let kubeconfig = c
        .service_account_kubeconfig(&ns.name, "chart-role", rules.clone())
        .await;
    let job_args = args(object(&docs, "Job"));
    let cron_args = args(object(&docs, "CronJob"));
    // Install: the hook Job's run creates everything and restarts the consumer.
    let report = certgen_as(&kubeconfig, &job_args)
        .run_async()
        .await
        .ok()
        .json();
    assert_eq!(consumer_actions(&report, "envoy-ratelimit"), ["restarted"]);
    let installed = c.versions(&ns.name).await;
    assert!(installed.values().all(Option::is_some), "{installed:?}");
    let installed_generation = generation(&deployments, "envoy-ratelimit").await;

    // The CronJob's run with nothing due: no write, no restart.
    let report = certgen_as(&kubeconfig, &cron_args)
        .run_async()
        .await
        .ok()
        .json();
    assert_eq!(
        consumer_actions(&report, "envoy-ratelimit"),
        ["already-restarted"]
    );
    assert_eq!(c.versions(&ns.name).await, installed);
    assert_eq!(
        generation(&deployments, "envoy-ratelimit").await,
        installed_generation
    );

    // A rotation with --overwrite (the rendered arguments hold --wait): trust, leaves, then
    // the cleanup that drops the old CA, each restart waited for.
    assert!(cron_args.contains(&"--wait".to_string()), "{cron_args:?}");
    let ca_before = c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap();
    let report = certgen_as(&kubeconfig, &cron_args)
        .arg("--overwrite")
        .run_async()
        .await
        .ok()
        .json();
    assert_eq!(
        consumer_actions(&report, "envoy-ratelimit"),
        ["restarted", "restarted", "restarted"]
    );
    let ca_after = c.secrets(&ns.name).get("envoy-gateway-ca").await.unwrap();
    assert_ne!(
        ca_before.data.unwrap()["tls.crt"],
        ca_after.data.unwrap()["tls.crt"],
        "a new CA"
    );

    // Without one verb of the Role, certgen exits 5 naming the verb, the resource and the
    // namespace, and says what to grant: patch on Secrets (the first write of a rotation) and
    // on Deployments (the restart that follows it).
    for (resource, verb) in [("secrets", "patch"), ("deployments", "patch")] {
        let kubeconfig = c
            .service_account_kubeconfig(
                &ns.name,
                &format!("chart-no-{verb}-{resource}"),
                without(&rules, resource, verb),
            )
            .await;
        let r = certgen_as(&kubeconfig, &cron_args)
            .arg("--overwrite")
            .run_async()
            .await;
        assert_forbidden(&r, verb, resource, &ns.name);
    }

    // Whatever those runs left half done, the rendered Role's plain run finishes.
    certgen_as(&kubeconfig, &cron_args).run_async().await.ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_watch_on_deployments_the_wait_exits_5_naming_the_verb() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("chart-watch").await;
    // A short --timeout, so that the bug costs 30 s rather than the default 4 min.
    let docs = documents(&template(&helm, &ns.name, &["--set", "timeout=30s"]));
    let _deployments = ratelimit_deployment(&c, &ns.name).await;
    let rules = rules(object(&docs, "Role"));
    let kubeconfig = c
        .service_account_kubeconfig(
            &ns.name,
            "chart-no-watch",
            without(&rules, "deployments", "watch"),
        )
        .await;
    // The install restarts the consumer, and --wait (in the rendered arguments) follows it.
    let r = certgen_as(&kubeconfig, &args(object(&docs, "Job")))
        .run_async()
        .await;
    assert_forbidden(&r, "watch", "deployments", &ns.name);
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_installs_and_upgrades_the_chart_with_its_hooks_in_a_restricted_namespace() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("chart-helm").await;
    // The hook Job's pod must pass the restricted Pod Security Standard, or it is never
    // created and the hook never completes. (kwok completes the pod without running certgen:
    // this is about Helm and the API server taking the chart, the runs are tested above.)
    Api::<Namespace>::all(c.client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
            }}})),
        )
        .await
        .unwrap();
    let chart = chart_dir();
    let kubeconfig = c.kubeconfig.to_str().unwrap().to_string();
    let helm_in_ns = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", &kubeconfig, "--namespace", &ns.name]);
        run_helm(&helm, &all)
    };
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(c.client.clone(), &ns.name);
    for verb in ["install", "upgrade"] {
        let out = helm_in_ns(&[
            verb,
            RELEASE,
            chart.to_str().unwrap(),
            "--set",
            "cronJob.enabled=true",
            "--wait",
            "--timeout",
            "120s",
        ]);
        assert!(out.contains("STATUS: deployed"), "{out}");
        let job = jobs.get("certgen").await.unwrap();
        assert_eq!(
            job.status.and_then(|s| s.succeeded),
            Some(1),
            "helm {verb} waited for the hook Job"
        );
    }
    let cronjobs: Api<k8s_openapi::api::batch::v1::CronJob> =
        Api::namespaced(c.client.clone(), &ns.name);
    assert!(cronjobs.get_opt("certgen").await.unwrap().is_some());
    // The hook's own identity went once the hook had run; the CronJob's is the release's.
    let sas: Api<ServiceAccount> = Api::namespaced(c.client.clone(), &ns.name);
    assert!(sas.get_opt("certgen-hook").await.unwrap().is_none());
    assert!(sas.get_opt("certgen").await.unwrap().is_some());
    helm_in_ns(&["uninstall", RELEASE, "--wait"]);
    assert!(cronjobs.get_opt("certgen").await.unwrap().is_none());
}

/// Every object labelled as `release`'s, cluster-wide (cluster-scoped and in every namespace,
/// `default` included), as `kind/name` lines: what `kubectl get` lists of every kind that can
/// be listed.
fn left_of(c: &Cluster, release: &str) -> Vec<String> {
    let kubeconfig = c.kubeconfig.to_str().unwrap();
    let kinds = c
        .kubectl()
        .args([
            "--kubeconfig",
            kubeconfig,
            "api-resources",
            "--verbs=list",
            "-o",
            "name",
        ])
        .output()
        .unwrap();
    assert!(kinds.status.success(), "{kinds:?}");
    let kinds: Vec<String> = String::from_utf8_lossy(&kinds.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let out = c
        .kubectl()
        .args([
            "--kubeconfig",
            kubeconfig,
            "get",
            &kinds.join(","),
            "-A",
            "-o",
            "name",
        ])
        .args(["-l", &format!("app.kubernetes.io/instance={release}")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_uninstall_and_the_notes_command_leave_nothing_of_the_release() {
    let Some(c) = cluster().await else { return };
    let Some(helm) = helm() else { return };
    let ns = c.namespace("chart-uninstall").await;
    // A release of its own name, so that nothing of another test carries its label.
    let release = format!("cg-{}", ns.name.rsplit('-').next().unwrap());
    let chart = chart_dir();
    let kubeconfig = c.kubeconfig.to_str().unwrap().to_string();
    let helm_in_ns = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", &kubeconfig, "--namespace", &ns.name]);
        run_helm(&helm, &all)
    };
    // Every identity and feature the chart has: the hook Job and the CronJob, the topology
    // injector's ClusterRole and its Events' Role in default, the exporter; and alerts asked
    // for on a cluster without the Prometheus Operator.
    let install = [
        "install",
        &release,
        chart.to_str().unwrap(),
        "--set",
        "metrics.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--wait",
        "--timeout",
        "120s",
    ];
    let out = helm_in_ns(&install);
    assert!(out.contains("STATUS: deployed"), "{out}");
    assert!(
        out.contains("no PrometheusRule CRD") && out.contains("the alerts were not installed"),
        "{out}"
    );
    let upgrade = helm_in_ns(&[&["upgrade"][..], &install[1..]].concat());
    assert!(upgrade.contains("STATUS: deployed"), "{upgrade}");
    let left = left_of(&c, &release);
    assert!(
        left.iter().any(|o| o.starts_with("clusterrole.")),
        "the release's own ClusterRole: {left:?}"
    );
    assert!(
        left.iter().all(|o| !o.contains("-hook")),
        "nothing of the hook's identity outlives the hook: {left:?}"
    );

    // Uninstall, then exactly the commands the notes give.
    helm_in_ns(&["uninstall", &release, "--wait"]);
    let commands: Vec<Vec<String>> = out
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("kubectl "))
        .map(|l| l.split_whitespace().skip(1).map(str::to_string).collect())
        .collect();
    assert!(!commands.is_empty(), "the notes give the commands: {out}");
    for args in &commands {
        let run = c.kubectl().args(args).output().unwrap();
        assert!(run.status.success(), "kubectl {args:?}: {run:?}");
    }
    // The garbage collector deletes the Job's pods after the Job.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let left = loop {
        let left = left_of(&c, &release);
        if left.is_empty() || std::time::Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(left.is_empty(), "left after uninstall: {left:?}");
}

/// The exporter's objects of a rendering (`app.kubernetes.io/component: exporter`).
fn exporter_objects(docs: &[Value]) -> Vec<Value> {
    docs.iter()
        .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == "exporter")
        .cloned()
        .collect()
}

#[test]
fn the_exporter_is_optional_secure_read_only_and_monitored_only_where_the_crd_exists() {
    let Some(helm) = helm() else { return };
    // Off by default: nothing of the exporter.
    let docs = documents(&template(&helm, "ops", &[]));
    assert!(exporter_objects(&docs).is_empty(), "{docs:#?}");

    let crd = ["--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"];
    let on = ["--set", "metrics.enabled=true"];
    // Without the Prometheus Operator's CRD: no ServiceMonitor.
    let docs = documents(&template(&helm, "ops", &on));
    let kinds = |docs: &[Value]| -> Vec<String> {
        let mut k: Vec<String> = exporter_objects(docs)
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_string())
            .collect();
        k.sort();
        k
    };
    assert_eq!(
        kinds(&docs),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "NetworkPolicy",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount"
        ]
    );
    // With it, unless switched off.
    let docs = documents(&template(&helm, "ops", &[&on[..], &crd[..]].concat()));
    assert!(kinds(&docs).contains(&"ServiceMonitor".to_string()));
    let monitor = object(&docs, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    // certgen's `namespace` label (the Secrets') survives the scrape for the alerts.
    assert_eq!(monitor["spec"]["endpoints"][0]["honorLabels"], true);
    let off = [
        &on[..],
        &crd[..],
        &["--set", "metrics.serviceMonitor.enabled=false"][..],
    ]
    .concat();
    assert!(!kinds(&documents(&template(&helm, "ops", &off))).contains(&"ServiceMonitor".into()));

    // The Deployment: the restricted security context, its own ServiceAccount, the exporter's
    // arguments, probes on the port the Service targets.
    let exporter = object(&docs, "Deployment");
    assert_secure(exporter);
    let spec = pod_spec(exporter);
    let sa = exporter_objects(&docs)
        .into_iter()
        .find(|d| d["kind"] == "ServiceAccount")
        .unwrap();
    assert_eq!(spec["serviceAccountName"], sa["metadata"]["name"]);
    assert_ne!(
        spec["serviceAccountName"],
        object(&docs, "Job")["spec"]["template"]["spec"]["serviceAccountName"],
        "the exporter does not share the writer's identity"
    );
    let container = &spec["containers"][0];
    let a: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    assert_eq!(a[0], "exporter", "{a:?}");
    for (flag, value) in [
        ("--namespace", "ops"),
        ("--profile", "envoy-gateway"),
        ("--listen", "0.0.0.0:9090"),
    ] {
        let i = a
            .iter()
            .position(|x| x == flag)
            .unwrap_or_else(|| panic!("{a:?}"));
        assert_eq!(a[i + 1], value, "{a:?}");
    }
    assert_eq!(container["ports"][0]["containerPort"], 9090);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    let service = object(&docs, "Service");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http-metrics");
    assert_eq!(
        service["spec"]["selector"],
        exporter["spec"]["selector"]["matchLabels"]
    );

    // Read-only RBAC: list and watch on Secrets (unrestricted by name: RBAC cannot restrict
    // one watch of many names), list and watch on the injector by name; nothing else.
    let ex = exporter_objects(&docs);
    let role = ex.iter().find(|d| d["kind"] == "Role").unwrap();
    let g = grants(&rules(role));
    let expected: BTreeMap<(String, String, String), Vec<String>> = ["list", "watch"]
        .iter()
        .map(|v| {
            (
                (String::new(), "secrets".to_string(), v.to_string()),
                vec!["*".to_string()],
            )
        })
        .collect();
    assert_eq!(g, expected);
    let cluster_role = ex.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let g = grants(&rules(cluster_role));
    let injector = vec!["envoy-gateway-topology-injector.ops".to_string()];
    let expected: BTreeMap<(String, String, String), Vec<String>> = ["list", "watch"]
        .iter()
        .map(|v| {
            (
                (
                    "admissionregistration.k8s.io".to_string(),
                    "mutatingwebhookconfigurations".to_string(),
                    v.to_string(),
                ),
                injector.clone(),
            )
        })
        .collect();
    assert_eq!(g, expected);

    // The NetworkPolicy admits the scrape only: TCP to the metrics port of the exporter's
    // pods, from Prometheus' servers (by default), nothing else.
    let policy = ex.iter().find(|d| d["kind"] == "NetworkPolicy").unwrap();
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        exporter["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress"])
    );
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1, "{policy:#}");
    assert_eq!(
        ingress[0]["ports"],
        serde_json::json!([{"port": "http-metrics", "protocol": "TCP"}])
    );
    assert_eq!(
        ingress[0]["from"],
        serde_json::json!([{
            "namespaceSelector": {},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
        }])
    );
    // Off on request.
    let no_policy = [
        &on[..],
        &["--set", "metrics.networkPolicy.enabled=false"][..],
    ]
    .concat();
    assert!(
        !kinds(&documents(&template(&helm, "ops", &no_policy))).contains(&"NetworkPolicy".into())
    );

    // Without the injector: no ClusterRole, and the exporter leaves it alone too.
    let docs = documents(&template(
        &helm,
        "ops",
        &[&on[..], &["--set", "topologyInjector=false"][..]].concat(),
    ));
    assert!(!kinds(&docs).contains(&"ClusterRole".into()), "{docs:#?}");
    let a: Vec<String> = serde_json::from_value(
        pod_spec(object(&docs, "Deployment"))["containers"][0]["args"].clone(),
    )
    .unwrap();
    assert!(a.contains(&"--disable-topology-injector".into()), "{a:?}");
}
