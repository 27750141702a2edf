//! The CA Secret's plan while the phases decide it ([`CaDraft`]), and what it becomes: the
//! write of each data key and the CAs that sign and are shown after the step ([`CaPlan`]).

use super::writes;
use super::{Action, CaPlan, CaRef, CasAfter, Signer};
use crate::config::Config;
use crate::pki::{CaKey, Cert};

/// The CA Secret's plan as the decisions leave it, before [`CaDraft::finish`] adds what is
/// written and what follows.
#[derive(Debug)]
pub(super) struct CaDraft {
    pub(super) name: String,
    pub(super) action: Action,
    pub(super) reason: String,
    /// The version the CA Secret was read at (`None`: absent).
    pub(super) version: Option<String>,
    pub(super) active: Option<CaKey>,
    pub(super) adopted: Option<Cert>,
    pub(super) pending: Option<CaKey>,
    /// The CA Secret's `ca.crt` after this step.
    pub(super) bundle: Vec<CaRef>,
    /// Data keys this step removes from the CA Secret.
    pub(super) remove: Vec<String>,
    /// The active and pending CAs were derived from the held Secrets (what was found): a
    /// write records them.
    pub(super) derived: Option<String>,
}

impl CaDraft {
    pub(super) fn finish(self, config: &Config) -> CaPlan {
        let held = |k: &Option<CaKey>| k.clone().map(Signer::Held);
        let current = self
            .active
            .as_ref()
            .map(|a| CaRef::Cert(a.cert.clone()))
            .or(self.adopted.clone().map(CaRef::Cert));
        let (new, after) = match self.action {
            Action::Create | Action::Rotate => (
                Some(config.ca.spec.clone()),
                CasAfter {
                    signer: Some(Signer::New),
                    pending: None,
                    shown: Some(CaRef::New),
                },
            ),
            Action::Trust => (
                Some(config.ca.spec.clone()),
                CasAfter {
                    signer: held(&self.active),
                    pending: Some(Signer::New),
                    shown: Some(CaRef::New),
                },
            ),
            Action::Promote => (
                None,
                CasAfter {
                    signer: held(&self.pending),
                    pending: None,
                    shown: self.pending.as_ref().map(|p| CaRef::Cert(p.cert.clone())),
                },
            ),
            Action::Keep
            | Action::UpdateBundle
            | Action::Renew
            | Action::Repair
            | Action::Delete => (
                None,
                CasAfter {
                    signer: held(&self.active),
                    pending: held(&self.pending),
                    shown: current,
                },
            ),
        };
        let write = writes::ca(
            self.action,
            &self.version,
            &self.bundle,
            &self.remove,
            writes::CaKeys {
                active: self.active.as_ref(),
                adopted: self.adopted.as_ref(),
                pending: self.pending.as_ref(),
                relayout: self.derived.is_some(),
            },
            &config.ca.layout,
        );
        CaPlan {
            name: self.name,
            action: self.action,
            reason: self.reason,
            active: self.active,
            adopted: self.adopted,
            pending: self.pending,
            bundle: self.bundle,
            new,
            write,
            after,
            derived: self.derived,
        }
    }
}
