//! The access review: one SelfSubjectRulesReview for the namespace, converted into
//! [`crate::access`]'s rules (which decide what certgen does without a verb).

use k8s_openapi::api::authorization::v1::{
    ResourceRule, SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::access::{Access, Rule};
use crate::config::WebhookKind;
use crate::store::{ApiFailure, StoreError};

/// Asks the API server which rules apply to this identity in `namespace`. A failed review is
/// not fatal: everything is then unknown and the real requests decide.
pub async fn review(client: &kube::Client, namespace: &str) -> Access {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.to_string()),
        },
        ..SelfSubjectRulesReview::default()
    };
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &review).await {
        Ok(r) => {
            let status = r.status.unwrap_or_default();
            if status.incomplete {
                tracing::debug!(
                    "the rules review is incomplete ({}); unlisted verbs are tried",
                    status.evaluation_error.unwrap_or_default()
                );
            }
            Access {
                rules: status.resource_rules.iter().map(from_review).collect(),
                incomplete: status.incomplete,
            }
        }
        Err(e) => {
            tracing::debug!("SelfSubjectRulesReview failed ({e}); unlisted verbs are tried");
            Access::unknown()
        }
    }
}

fn from_review(r: &ResourceRule) -> Rule {
    Rule {
        verbs: r.verbs.clone(),
        groups: r.api_groups.clone().unwrap_or_default(),
        resources: r.resources.clone().unwrap_or_default(),
        names: r.resource_names.clone().unwrap_or_default(),
    }
}

/// Whether this identity may `verb` objects of `kind` (`name`: one of them; `None`: all), by a
/// SelfSubjectAccessReview naming it (exact, including `resourceNames` rules). `None` when the
/// review itself failed: the request then finds out.
pub async fn may(
    client: &kube::Client,
    verb: &'static str,
    kind: WebhookKind,
    name: Option<&str>,
) -> Option<bool> {
    may_on(client, verb, (kind.group(), kind.plural()), name).await
}

/// [`may`] for any cluster-scoped resource (`group`, `plural`).
pub async fn may_on(
    client: &kube::Client,
    verb: &str,
    (group, plural): (&str, &str),
    name: Option<&str>,
) -> Option<bool> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.to_string()),
                resource: Some(plural.to_string()),
                verb: Some(verb.to_string()),
                name: name.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &review).await {
        Ok(r) => r.status.map(|s| s.allowed),
        Err(e) => {
            tracing::debug!(
                "the access review of {verb} {} {} failed: {e}",
                plural,
                name.unwrap_or("(all)")
            );
            None
        }
    }
}

/// The refusal of `verb` on target `name` of `kind` that [`may`] found before any write.
pub fn refused_before_writing(verb: &'static str, kind: WebhookKind, name: &str) -> StoreError {
    let (plural, group) = (kind.plural(), kind.group());
    StoreError::Api(Box::new(ApiFailure {
        verb,
        resource: plural,
        namespace: String::new(),
        name: name.to_string(),
        status: Some(403),
        message: "this identity may not (an access review, made before the first write); nothing was written".into(),
        hint: format!(
            "; grant the {verb} verb on {plural} (group {group}) cluster-wide (a ClusterRole) to this identity, as kube-webhook-certgen's patch Job needs"
        ),
    }))
}
