//! HMAC Secrets: created when missing, replaced with `--rotate-hmac` (or `--force` when
//! unusable), refused with the fix when they hold no usable key.

use super::stored::Judge;
use super::writes;
use super::{Action, Invalid, Kind, Options, SecretPlan};
use crate::config::{Config, HmacSecret};
use crate::observe::Snapshot;
use crate::secret::Observed;

pub(super) fn plans(
    judge: &Judge<'_>,
    config: &Config,
    observed: &Snapshot,
    options: Options,
) -> Result<Vec<SecretPlan>, Invalid> {
    config
        .hmac
        .iter()
        .map(|h| plan_one(judge, h, observed.get(&h.name), options))
        .collect()
}

fn plan_one(
    judge: &Judge<'_>,
    h: &HmacSecret,
    observed: &Observed,
    options: Options,
) -> Result<SecretPlan, Invalid> {
    let version = observed.present().map(|s| s.version.clone());
    let (action, reason) = match observed.present() {
        None => (Action::Create, "missing".to_string()),
        Some(s) => {
            if !judge.hmac(s, &h.key)? {
                if !options.force {
                    return Err(judge.invalid(
                        &h.name,
                        format!("key {:?} is missing or empty", h.key),
                        "nothing was written; delete the Secret to have it recreated, or run with --force",
                    ));
                }
                (
                    Action::Renew,
                    format!("key {:?} missing; replaced because of --force", h.key),
                )
            } else if options.rotate_hmac {
                (Action::Renew, "--rotate-hmac".to_string())
            } else if let Some(short) = crate::observe::parse::hmac_short(s, &h.key, h.bytes) {
                if !options.force {
                    return Err(judge.invalid(
                        &h.name,
                        short,
                        "nothing was written; delete the Secret to have it recreated, or run with --force (or --rotate-hmac) to replace it",
                    ));
                }
                (
                    Action::Renew,
                    format!("{short}; replaced because of --force"),
                )
            } else {
                (Action::Keep, "present".to_string())
            }
        }
    };
    Ok(SecretPlan {
        name: h.name.clone(),
        kind: Kind::Hmac,
        action,
        reason,
        not_after: None,
        write: action
            .writes()
            .then(|| writes::hmac(&version, &h.key, h.bytes)),
    })
}
