//! The access review: one SelfSubjectRulesReview for the namespace, converted into
//! [`crate::access`]'s rules (which decide what certgen does without a verb).

use k8s_openapi::api::authorization::v1::{
    ResourceRule, SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::access::{Access, Rule};

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
