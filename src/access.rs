//! What this identity may do, and what certgen does without it.
//!
//! certgen must run under Envoy Gateway's own chart Role (Secrets get/create/update; the
//! topology injector webhook get/update), which grants no `patch`, no Leases, no Deployments
//! and no EndpointSlices. Features the user did not ask for are skipped with a warning and a
//! line in the report, never a failed Job; a feature the user asked for (`--wait`, `--probe`)
//! whose verbs are missing is exit 5 naming the verb.
//!
//! When it is asked: only with `--wait` or `--probe`, whose missing verbs must fail the run
//! before anything is written. Otherwise nothing is asked ([`Access::unknown`]): every feature
//! is tried and a 403 skips it for the rest of the run with the same warning and report line
//! (docs/api-requests.md), which saves the review's request on every run.
//!
//! How it is asked: one SelfSubjectRulesReview for the namespace (one request, any
//! authenticated identity may make it). A SelfSubjectAccessReview per verb would be exact but
//! costs a request for each of about eight verbs on every run, no-ops included. A rules review
//! can be incomplete (webhook authorizers cannot list their rules): then anything not listed is
//! "unknown", and certgen tries the real request and acts on the server's answer. The rules
//! review is used only to choose what to attempt; every write stays fenced and every refusal
//! from the server is still handled where it happens (a 403 on a Secret patch falls back to a
//! fenced update, a 403 on the Lease makes the run proceed without the lock). The review itself
//! is the Kubernetes adapter's ([`crate::k8s::review`]); this module is pure and unit-tested.

use crate::config::{Config, Reload, Workload};
use crate::store::{ApiFailure, StoreError};

/// How a change to an existing Secret is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretWriteVerb {
    /// A JSON merge patch carrying the resourceVersion (one request, only the changed keys).
    Patch,
    /// An update of the whole Secret as read, carrying its resourceVersion.
    Update,
}

/// One rule: verbs on resources of API groups, optionally only for some names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub groups: Vec<String>,
    pub resources: Vec<String>,
    pub names: Vec<String>,
}

impl Rule {
    /// A rule from string slices (tests, and converting the review's rules).
    pub fn new(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> Self {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Self {
            verbs: own(verbs),
            groups: own(groups),
            resources: own(resources),
            names: own(names),
        }
    }
}

/// What the rules review said.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub rules: Vec<Rule>,
    /// The review could not list every rule: absence of a rule proves nothing.
    pub incomplete: bool,
}

/// One question: may this identity `verb` `resource` (of `group`), named `name` if given?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verb {
    pub group: &'static str,
    pub resource: &'static str,
    pub verb: &'static str,
}

const fn verb(group: &'static str, resource: &'static str, verb: &'static str) -> Verb {
    Verb {
        group,
        resource,
        verb,
    }
}

/// Patching Secrets.
pub const SECRETS_PATCH: Verb = verb("", "secrets", "patch");

/// Whether one rule grants `v` on `name` (`None`: a request without a name, like list).
pub fn rule_grants(rule: &Rule, v: Verb, name: Option<&str>) -> bool {
    let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
    any(&rule.verbs, v.verb)
        && any(&rule.groups, v.group)
        && any(&rule.resources, v.resource)
        && (rule.names.is_empty() || name.is_some_and(|n| rule.names.iter().any(|x| x == n)))
}

impl Access {
    /// Nothing known (no review made): every verb is tried and the server's answer acted on.
    pub fn unknown() -> Self {
        Self {
            rules: vec![],
            incomplete: true,
        }
    }

    /// `Some(true)` granted, `Some(false)` not granted, `None` unknown (incomplete review).
    pub fn allows(&self, v: Verb, name: Option<&str>) -> Option<bool> {
        if self.rules.iter().any(|r| rule_grants(r, v, name)) {
            Some(true)
        } else if self.incomplete {
            None
        } else {
            Some(false)
        }
    }

    /// The verbs of `wanted` that are known not to be granted.
    fn missing(&self, wanted: &[(Verb, Option<&str>)]) -> Vec<Verb> {
        wanted
            .iter()
            .filter(|(v, n)| self.allows(*v, *n) == Some(false))
            .map(|(v, _)| *v)
            .collect()
    }

    /// How the Secrets `names` are written: patch when granted for each (or unknown: a 403
    /// still falls back to update), update when patch is known to be missing for any.
    pub fn secret_write_verb(&self, names: &[&str]) -> SecretWriteVerb {
        if names
            .iter()
            .any(|n| self.allows(SECRETS_PATCH, Some(n)) == Some(false))
        {
            SecretWriteVerb::Update
        } else {
            SecretWriteVerb::Patch
        }
    }
}

/// What the user asked for explicitly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked {
    pub wait: bool,
    pub probe: bool,
}

fn names(verbs: &[Verb]) -> String {
    verbs
        .iter()
        .map(|v| {
            let group = if v.group.is_empty() {
                String::new()
            } else {
                format!(".{}", v.group)
            };
            format!("{} {}{group}", v.verb, v.resource)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The error for a feature the user asked for (`flag`) that needs `verbs` this identity
/// lacks in `namespace` (on object `name`): a 403 naming the first verb, with how to grant it.
fn refused(verbs: &[Verb], namespace: &str, name: &str, flag: &str) -> StoreError {
    let first = verbs[0];
    StoreError::Api(Box::new(ApiFailure {
        verb: first.verb,
        resource: first.resource,
        namespace: namespace.to_string(),
        name: name.to_string(),
        status: Some(403),
        message: format!(
            "{flag} was given, but this identity may not {} in namespace {namespace} (forbidden, 403, says a SelfSubjectRulesReview)",
            names(verbs)
        ),
        hint: format!(
            "; grant the {} verb on {}{} in namespace {namespace} to this identity{} (certgen's own chart Role has them), or run without {flag}",
            first.verb,
            first.resource,
            if first.group.is_empty() {
                String::new()
            } else {
                format!(" (group {})", first.group)
            },
            if verbs.len() > 1 {
                format!(", and {}", names(&verbs[1..]))
            } else {
                String::new()
            }
        ),
    }))
}

/// Adapts `config` to what this identity may do: a restart-only consumer whose workload
/// verbs are missing is not restarted, a probe whose Service/EndpointSlice verbs are missing is
/// dropped, each with a note for the report (returned, and on the consumer). When the user
/// asked for the feature (`--wait`, `--probe`), a missing verb is an error naming it (exit 5).
pub fn adapt(
    config: &mut Config,
    access: &Access,
    asked: Asked,
) -> Result<Vec<String>, StoreError> {
    let namespace = config.namespace.clone();
    let mut notes = Vec::new();
    // caBundle targets (src/store/webhook.rs): read and updated by name, cluster-wide.
    config.webhooks.retain(|w| {
        let (group, resource) = (w.kind.group(), w.kind.plural());
        let name = Some(w.name.as_str());
        let missing = access.missing(&[
            (verb(group, resource, "get"), name),
            (verb(group, resource, "update"), name),
        ]);
        if missing.is_empty() {
            return true;
        }
        let note = format!(
            "{} {}: caBundle not kept in step: this identity may not {} (cluster-wide); grant them, or pass --disable-topology-injector for Envoy Gateway's injector",
            resource, w.name,
            names(&missing)
        );
        tracing::warn!("{note}");
        notes.push(note);
        false
    });
    for c in &mut config.consumers {
        if c.reload == Reload::Restart
            && let Some(workload) = &c.workload
        {
            let (group, resource) = (c.kind.group(), c.kind.resource());
            let (read, name) = match workload {
                Workload::Name(n) => (verb(group, resource, "get"), Some(n.as_str())),
                Workload::Selector(_) => (verb(group, resource, "list"), None),
            };
            let mut wanted = vec![(read, name), (verb(group, resource, "patch"), name)];
            if asked.wait {
                wanted.push((verb(group, resource, "list"), None));
                wanted.push((verb(group, resource, "watch"), None));
            }
            let missing = access.missing(&wanted);
            if !missing.is_empty() {
                let what = match workload {
                    Workload::Name(n) => n.clone(),
                    Workload::Selector(s) => s.clone(),
                };
                if asked.wait {
                    return Err(refused(&missing, &namespace, &what, "--wait"));
                }
                let note = format!(
                    "not restarted: this identity may not {} in namespace {namespace}; restart it after a rotation (kubectl rollout restart), or grant those verbs",
                    names(&missing)
                );
                tracing::warn!(consumer = %c.name, "{note}");
                notes.push(format!("consumer {}: {note}", c.name));
                c.skipped.push(note);
                c.workload = None;
            }
        }
        if let Some(p) = &c.probe
            && let Some(service) = &p.service
        {
            let missing = access.missing(&[
                (verb("", "services", "get"), Some(service.as_str())),
                (verb("discovery.k8s.io", "endpointslices", "list"), None),
            ]);
            if !missing.is_empty() {
                if asked.probe {
                    return Err(refused(&missing, &namespace, service, "--probe"));
                }
                let note = format!(
                    "not probed: this identity may not {} in namespace {namespace}",
                    names(&missing)
                );
                tracing::warn!(consumer = %c.name, "{note}; the rotation gate relies on the propagation delay");
                notes.push(format!("consumer {}: {note}", c.name));
                c.skipped.push(note);
                c.probe = None;
            }
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Env, Overrides, Source};

    const NAMES: [&str; 5] = [
        "envoy-gateway-ca",
        "envoy-gateway",
        "envoy",
        "envoy-rate-limit",
        "envoy-oidc-hmac",
    ];

    fn eg_config() -> Config {
        Config::resolve(
            &Source::Profile("envoy-gateway".into()),
            &Overrides::default(),
            &Env::default(),
        )
        .unwrap()
    }

    /// Envoy Gateway v1.9.1's chart: Role certgen (secrets get/create/update) and ClusterRole
    /// (webhook get/list/watch; update/patch by name).
    fn envoy_gateway_role() -> Access {
        Access {
            rules: vec![
                Rule::new(&[""], &["secrets"], &["get", "create", "update"], &[]),
                Rule::new(
                    &["admissionregistration.k8s.io"],
                    &["mutatingwebhookconfigurations"],
                    &["get", "list", "watch"],
                    &[],
                ),
                Rule::new(
                    &["admissionregistration.k8s.io"],
                    &["mutatingwebhookconfigurations"],
                    &["update", "patch"],
                    &["envoy-gateway-topology-injector.envoy-gateway-system"],
                ),
            ],
            incomplete: false,
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_and_names() {
        let r = Rule::new(&["apps"], &["deployments"], &["get", "patch"], &["a"]);
        let get = verb("apps", "deployments", "get");
        assert!(rule_grants(&r, get, Some("a")));
        assert!(!rule_grants(&r, get, Some("b")));
        assert!(
            !rule_grants(&r, get, None),
            "a named rule does not grant list-like requests"
        );
        assert!(!rule_grants(&r, verb("", "deployments", "get"), Some("a")));
        assert!(!rule_grants(&r, verb("apps", "deployments", "list"), None));
        let star = Rule::new(&["*"], &["*"], &["*"], &[]);
        assert!(rule_grants(&star, verb("x", "y", "z"), None));
    }

    #[test]
    fn incomplete_reviews_make_unlisted_verbs_unknown() {
        let access = Access {
            rules: vec![],
            incomplete: true,
        };
        assert_eq!(access.allows(SECRETS_PATCH, None), None);
        assert_eq!(access.secret_write_verb(&["a"]), SecretWriteVerb::Patch);
    }

    #[test]
    fn without_a_review_every_feature_is_tried() {
        // No --wait/--probe: nothing is ruled out up front; refusals are met where they happen.
        let mut config = eg_config();
        let before = (config.webhooks.len(), config.consumers.clone());
        let notes = adapt(&mut config, &Access::unknown(), Asked::default()).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((config.webhooks.len(), config.consumers), before);
    }

    #[test]
    fn envoy_gateway_role_writes_with_update_and_skips_what_nobody_asked_for() {
        let access = envoy_gateway_role();
        assert_eq!(access.secret_write_verb(&NAMES), SecretWriteVerb::Update);
        let mut config = eg_config();
        let notes = adapt(&mut config, &access, Asked::default()).unwrap();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert_eq!(
            config.webhooks.len(),
            1,
            "the chart's ClusterRole grants the webhook"
        );
        let rl = config
            .consumers
            .iter()
            .find(|c| c.name == "envoy-ratelimit")
            .unwrap();
        assert_eq!(rl.workload, None);
        assert!(
            rl.skipped[0].contains("get deployments.apps, patch deployments.apps"),
            "{:?}",
            rl.skipped
        );
        let eg = config
            .consumers
            .iter()
            .find(|c| c.name == "envoy-gateway")
            .unwrap();
        assert_eq!(eg.probe, None);
        assert!(eg.skipped[0].contains("list endpointslices.discovery.k8s.io"));
        // Hot consumers need nothing: left as they are.
        let proxies = config
            .consumers
            .iter()
            .find(|c| c.name == "envoy-proxies")
            .unwrap();
        assert!(proxies.workload.is_some() && proxies.skipped.is_empty());
    }

    #[test]
    fn asked_features_without_their_verbs_are_refused_naming_the_verb() {
        let access = envoy_gateway_role();
        let err = adapt(
            &mut eg_config(),
            &access,
            Asked {
                wait: true,
                probe: false,
            },
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("--wait") && text.contains("get deployments.apps"),
            "{text}"
        );
        let err = adapt(
            &mut eg_config(),
            &access,
            Asked {
                wait: false,
                probe: true,
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("get services"), "{err}");
    }

    #[test]
    fn certgens_own_role_changes_nothing() {
        let access = Access {
            rules: vec![
                // Like certgen's chart: get and patch limited to the profile's Secrets by name.
                Rule::new(&[""], &["secrets"], &["create"], &[]),
                Rule::new(&[""], &["secrets"], &["get", "patch"], &NAMES),
                Rule::new(
                    &["apps"],
                    &["deployments"],
                    &["get", "list", "watch", "patch"],
                    &[],
                ),
                Rule::new(&[""], &["services"], &["get"], &[]),
                Rule::new(&["discovery.k8s.io"], &["endpointslices"], &["list"], &[]),
            ],
            incomplete: false,
        };
        let mut config = eg_config();
        let mut before = config.clone();
        let asked = Asked {
            wait: true,
            probe: true,
        };
        let notes = adapt(&mut config, &access, asked).unwrap();
        // This Role has no webhook verbs: the caBundle target is dropped, with a note.
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("get mutatingwebhookconfigurations.admissionregistration.k8s.io"),
            "{}",
            notes[0]
        );
        before.webhooks.clear();
        assert_eq!(config, before, "nothing else changes");
        assert_eq!(access.secret_write_verb(&NAMES), SecretWriteVerb::Patch);
        // One Secret outside the names: its patch is known to be refused.
        let more = [NAMES.as_slice(), &["other"]].concat();
        assert_eq!(access.secret_write_verb(&more), SecretWriteVerb::Update);
    }
}
