//! What the planner makes of each stored Secret: the parser's results ([`crate::observe::parse`])
//! taken the planner's way. A Secret certgen may not touch (another manager's, of the wrong
//! type) is an [`Invalid`] error; unusable contents are an error too, or with `--force` the
//! reason to replace them. The first problem decides, in a fixed order of the data keys.

use super::{Invalid, Options};
use crate::observe::parse::{self, Bundle, Field};
use crate::pki::{CaKey, Cert, CertError, KeyError};
use crate::secret::{Layout, Observed, StoredSecret, TYPE_OPAQUE};

/// A usable TLS Secret.
#[derive(Debug)]
pub(super) struct Leaf {
    pub cert: Cert,
    /// The CAs of its `ca.crt` that a TLS verifier would use: a CA it would reject
    /// ([`super::valid::ca_refusal`]) trusts nothing, and the planner treats it as absent.
    pub bundle: Vec<Cert>,
}

/// A TLS Secret as the planner takes it.
#[derive(Debug)]
pub(super) enum Parsed {
    Missing,
    /// Unusable and `--force` was given: replace it.
    Broken(String),
    Ok(Box<Leaf>),
}

/// The active CA: its key held by certgen, or another tool's certificate alone.
#[derive(Debug, Clone)]
pub(super) enum Active {
    Keyed(CaKey),
    Adopted(Cert),
}

impl Active {
    pub fn cert(&self) -> &Cert {
        match self {
            Self::Keyed(k) => &k.cert,
            Self::Adopted(c) => c,
        }
    }
}

/// The CA Secret as the planner takes it.
#[derive(Debug, Default)]
pub(super) struct CaSecret {
    pub version: Option<String>,
    pub active: Option<Active>,
    pub bundle: Vec<Cert>,
    pub pending: Option<CaKey>,
    /// Unusable and `--force` was given: replaced by a new CA.
    pub broken: Option<String>,
    /// The pending CA was unusable and `--force` was given: `next.*` are removed.
    pub drop_pending: bool,
    /// What the TLS Secrets hold disagrees with this CA Secret (another tool wrote them since
    /// certgen's last run): `active` and `pending` were derived from the held Secrets
    /// (`plan/held.rs`), and the next write of the CA Secret records them.
    pub derived: Option<String>,
    /// `derived` is the CA the held Secrets already agree on (no rotation to stage): the
    /// planner maintains it as the active CA.
    pub agreed: bool,
}

/// Judges stored Secrets under the run's options, naming objects for messages.
pub(super) struct Judge<'a> {
    pub options: Options,
    pub object: &'a dyn Fn(&str) -> String,
    /// Why a TLS verifier would reject a CA for this config's leaves, if it would
    /// ([`super::valid::ca_refusal`]).
    pub refuse_ca: &'a dyn Fn(&Cert) -> Option<String>,
}

impl Judge<'_> {
    pub fn invalid(
        &self,
        name: &str,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Invalid {
        Invalid {
            object: (self.object)(name),
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    /// A repairable problem: an error, or with `--force` the reason to replace the contents.
    fn broken(&self, name: &str, problem: String) -> Result<String, Invalid> {
        if self.options.force {
            Ok(problem)
        } else {
            Err(self.invalid(
                name,
                problem,
                "nothing was written; fix or delete it, or run with --force to have certgen replace its contents",
            ))
        }
    }

    /// Refuses a Secret another manager owns (unless forced) or of the wrong type (always).
    fn check_common(&self, s: &StoredSecret, want_type: &str) -> Result<(), Invalid> {
        match parse::foreign_owner(s) {
            Some(parse::Foreign::CertManager(why)) => {
                return Err(self.invalid(
                    &s.name,
                    format!("refusing to write it: {why}"),
                    format!(
                        "nothing was written. Leave it to cert-manager and remove it from certgen's config, or hand it to certgen: delete the Certificate (`kubectl delete certificate -n NAMESPACE {}`), then run certgen again: it adopts the CA the Secret trusts and rotates from there (docs/cert-manager.md). --force does not take a Secret from a live Certificate: the two would overwrite each other",
                        s.certificate.as_ref().map_or_else(
                            || crate::certmanager::certificate_of(&s.annotations, &s.name).unwrap_or("NAME").to_string(),
                            |c| c.name().to_string()
                        )
                    ),
                ));
            }
            Some(parse::Foreign::Other(owner)) if !self.options.force => {
                return Err(self.invalid(
                    &s.name,
                    format!("refusing to take it over: {owner}"),
                    "remove it from the other manager, choose another Secret name, or run with --force",
                ));
            }
            _ => {}
        }
        if s.type_ != want_type {
            return Err(self.invalid(
                &s.name,
                format!("has type {:?}, expected {want_type:?}", s.type_),
                "nothing was written. The type of a Secret cannot be changed, and this one may be another tool's (cilium/certgen's `cilium-ca`, for one, holds a CA key other certificates depend on): give certgen a Secret name of its own in the config (ca.secretName, or the secret's name), or, to manage that CA where it is, declare its layout (ca.secretType and ca.dataKeys; the cilium-clustermesh profile does for cilium-ca); delete it only if it is certgen's own from an earlier layout, then run certgen again",
            ));
        }
        Ok(())
    }

    /// The first visible file certgen cannot account for (local mode), unless forced: it
    /// cannot tell whether that file or its own copy is the one meant.
    pub fn foreign_files<'o>(
        &self,
        observed: impl IntoIterator<Item = &'o Observed>,
    ) -> Result<(), Invalid> {
        if self.options.force {
            return Ok(());
        }
        let foreign = observed
            .into_iter()
            .filter_map(Observed::present)
            .flat_map(|s| &s.divergent)
            .find(|d| !d.repairable());
        match foreign {
            None => Ok(()),
            Some(d) => Err(Invalid {
                object: d.path.clone(),
                problem: format!(
                    "{}; certgen cannot tell whether it or its own copy in ..data/{} is the one meant",
                    d.what(),
                    d.key
                ),
                fix: "nothing was written; delete it to have certgen link its own copy back, or run with --force to replace it".into(),
            }),
        }
    }

    /// A TLS Secret: it needs `tls.crt` and `tls.key` that match, and a `ca.crt` (if any)
    /// within the bundle rules (under the names and the type of its `layout`).
    pub fn leaf(
        &self,
        name: &str,
        observed: &Observed,
        layout: &Layout,
    ) -> Result<Parsed, Invalid> {
        let Some(s) = observed.present() else {
            return Ok(Parsed::Missing);
        };
        self.check_common(s, layout.type_)?;
        let data = parse::leaf_in(s, layout);
        let broken = |problem: String| self.broken(name, problem).map(Parsed::Broken);
        let (crt, key, bundle_key) = (&layout.cert, &layout.key, &layout.bundle);
        let cert = match data.cert {
            _ if data.key.missing() => None,
            Field::Ok(c) => Some(c),
            Field::Bad(p) => return broken(format!("{crt}: {p}")),
            Field::Absent | Field::Empty | Field::Unchecked => None,
        };
        let Some(cert) = cert else {
            return broken(format!("{crt} or {key} is missing or empty"));
        };
        if let Field::Bad(p) = &data.key {
            return broken(format!("{key}: {p}"));
        }
        let bundle = match data.bundle {
            Field::Absent | Field::Empty | Field::Unchecked => Vec::new(),
            Field::Bad(p) => return broken(format!("{bundle_key}: {p}")),
            Field::Ok(Bundle {
                broken: Some(e), ..
            }) => return broken(format!("{bundle_key}: {e}")),
            Field::Ok(b) => b.certs,
        };
        let bundle = bundle
            .into_iter()
            .filter(|c| (self.refuse_ca)(c).is_none())
            .collect();
        Ok(Parsed::Ok(Box::new(Leaf { cert, bundle })))
    }

    /// The CA Secret (of `layout`): an active CA (`tls.crt`, and `tls.key` empty for another
    /// tool's CA), its `ca.crt`, and a staged rotation's pending CA (`next.crt`, `next.key`).
    pub fn ca(
        &self,
        name: &str,
        observed: &Observed,
        layout: &Layout,
    ) -> Result<CaSecret, Invalid> {
        let Some(s) = observed.present() else {
            return Ok(CaSecret::default());
        };
        self.check_common(s, layout.type_)?;
        let mut out = CaSecret {
            version: Some(s.version.clone()),
            ..CaSecret::default()
        };
        let data = parse::ca(s, layout);
        let refused = |cert: &Cert, key: &str| {
            (self.refuse_ca)(cert).map(|why| {
                format!(
                    "{key}: CA {} would be rejected by TLS verifiers: {why}",
                    cert.short_fingerprint()
                )
            })
        };
        let active = active(data.cert, data.key, data.bundle, layout)
            .and_then(|(a, b)| refused(a.cert(), &layout.cert).map_or(Ok((a, b)), Err));
        match active {
            Ok((active, bundle)) => {
                out.active = Some(active);
                out.bundle = bundle;
            }
            Err(problem) => {
                out.broken = Some(self.broken(name, problem)?);
                return Ok(out);
            }
        }
        if matches!(
            (&data.next_cert, &data.next_key),
            (Field::Absent, Field::Absent)
        ) {
            return Ok(out);
        }
        let pending = pending(data.next_cert, data.next_key)
            .and_then(|p| refused(&p.cert, "next.crt").map_or(Ok(p), Err));
        match pending {
            Ok(p) => out.pending = Some(p),
            // With --force an unusable pending CA is dropped and a rotation starts afresh.
            Err(problem) => {
                self.broken(name, format!("pending CA: {problem}"))?;
                out.drop_pending = true;
            }
        }
        Ok(out)
    }

    /// An HMAC Secret: its key must be there, non-empty (`Ok(false)` with `--force`).
    pub fn hmac(&self, s: &StoredSecret, key: &str) -> Result<bool, Invalid> {
        self.check_common(s, TYPE_OPAQUE)?;
        Ok(!parse::hmac(s, key).missing())
    }
}

/// The active CA and the CA Secret's bundle (in `layout`'s keys), or the first problem with
/// them. Here an empty `tls.crt` or `ca.crt` is unusable, not missing: only `tls.key` may be
/// empty.
fn active(
    cert: Field<Cert>,
    key: Field<CaKey>,
    bundle: Field<Bundle>,
    layout: &Layout,
) -> Result<(Active, Vec<Cert>), String> {
    let (cert_key, key_key, bundle_key) = (&layout.cert, &layout.key, &layout.bundle);
    let cert = ca_cert(
        cert,
        &key,
        cert_key,
        &format!("{cert_key} is missing"),
        &format!("{key_key} is missing"),
    )?;
    let active = match key {
        // An empty key: the CA of another tool, kept as the active trust while a staged
        // migration to a certgen CA runs (see `Active::Adopted`).
        Field::Empty => Active::Adopted(cert),
        Field::Ok(k) => Active::Keyed(k),
        Field::Bad(p) => return Err(format!("{key_key}: {p}")),
        Field::Absent | Field::Unchecked => return Err(format!("{key_key} is missing")),
    };
    let bundle = match bundle {
        Field::Absent => Vec::new(),
        Field::Bad(p) => return Err(format!("{bundle_key}: {p}")),
        Field::Empty | Field::Unchecked => {
            return Err(format!("{bundle_key}: {}", CertError::Empty));
        }
        Field::Ok(Bundle {
            broken: Some(e), ..
        }) => return Err(format!("{bundle_key}: {e}")),
        Field::Ok(b) => b.certs,
    };
    Ok((active, bundle))
}

/// The pending CA, or the first problem with it (at least one of its keys is there). `check`
/// judges a stored pending CA with the same rules ([`crate::plan::pending_ca`]).
pub(crate) fn pending(cert: Field<Cert>, key: Field<CaKey>) -> Result<CaKey, String> {
    ca_cert(
        cert,
        &key,
        "next.crt",
        "next.key is present but next.crt is missing",
        "next.crt is present but next.key is missing",
    )?;
    match key {
        Field::Ok(k) => Ok(k),
        Field::Bad(p) => Err(format!("next.key: {p}")),
        Field::Empty | Field::Absent | Field::Unchecked => {
            Err(format!("next.key: {}", KeyError::Unreadable))
        }
    }
}

/// The CA certificate in the data key `name`, or the first problem with it and its key
/// (`no_cert` or `no_key` when either data key is absent).
fn ca_cert<K>(
    cert: Field<Cert>,
    key: &Field<K>,
    name: &str,
    no_cert: &str,
    no_key: &str,
) -> Result<Cert, String> {
    let cert = match cert {
        Field::Absent => return Err(no_cert.into()),
        _ if matches!(key, Field::Absent) => return Err(no_key.into()),
        Field::Ok(c) => c,
        Field::Bad(p) => return Err(format!("{name}: {p}")),
        Field::Empty | Field::Unchecked => return Err(format!("{name}: {}", CertError::Empty)),
    };
    if !cert.is_ca {
        return Err(format!("{name} ({}) is not a CA certificate", cert.subject));
    }
    Ok(cert)
}
