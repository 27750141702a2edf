//! cert-manager's vocabulary, as certgen needs it to never fight cert-manager: which objects
//! its CA injector writes (the annotations it acts on, by its own rules), which Secrets a
//! `Certificate` issues into, and the marks certgen's hand-over leaves. Pure: reading the
//! objects is the adapter's (`crate::k8s`), deciding what to do the driver's and the planner's.

use std::collections::BTreeMap;
use std::fmt;

/// The CA injector fills in the `caBundle` of an object carrying this annotation
/// (`namespace/name` of a `Certificate`) from that Certificate's Secret.
pub const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";
/// The CA injector fills it in from this Secret's `ca.crt` (`namespace/name`).
pub const INJECT_CA_FROM_SECRET: &str = "cert-manager.io/inject-ca-from-secret";
/// With `"true"`, the CA injector fills it in with the API server's own CA.
pub const INJECT_APISERVER_CA: &str = "cert-manager.io/inject-apiserver-ca";

/// The annotation cert-manager puts on every Secret a `Certificate` issues into: its name.
pub const CERTIFICATE_NAME: &str = "cert-manager.io/certificate-name";

/// Put on the `Certificate`s (and, through their `secretTemplate`, on the Secrets) that
/// `certgen handover cert-manager` made: certgen stands down on such a Secret while its
/// Certificate exists, instead of refusing it. The value is the profile handed over.
pub const HANDED_OVER: &str = "certgen.dev/handed-over-to-cert-manager";

/// What to do when a target the CA injector writes lacks a staged rotation's pending CA: the
/// fix the trust gate's timeout and `check` both give.
pub const PENDING_CA_FIX: &str = "check that cert-manager-cainjector runs and that its source holds the pending CA, or remove the annotation so that certgen keeps the caBundle";

/// Why cert-manager's CA injector writes an object's `caBundle`: the annotation it acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub annotation: &'static str,
    pub value: String,
}

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.annotation, self.value)
    }
}

/// Whether cert-manager's CA injector writes the `caBundle` of an object with these
/// annotations, by the injector's own rules (cert-manager `pkg/controller/cainjector/
/// sources.go`): `inject-ca-from` or `inject-ca-from-secret` present, whatever the value;
/// `inject-apiserver-ca` only when `"true"`.
pub fn injected(annotations: &BTreeMap<String, String>) -> Option<Injected> {
    let found = |annotation: &'static str| {
        annotations.get(annotation).map(|value| Injected {
            annotation,
            value: value.clone(),
        })
    };
    found(INJECT_CA_FROM)
        .or_else(|| found(INJECT_CA_FROM_SECRET))
        .or_else(|| found(INJECT_APISERVER_CA).filter(|i| i.value == "true"))
}

/// The report line of a `caBundle` target cert-manager's CA injector writes.
pub fn injected_note(what: &str, by: &Injected) -> String {
    format!(
        "{what}: caBundle managed by cert-manager's CA injector ({by}): certgen never writes it, so the two never overwrite each other; remove the annotation to have certgen keep it in step instead"
    )
}

/// The `Certificate` that issues into Secret `name`, as its annotations tell, if any: the one
/// cert-manager names once it issued into it, or, on a Secret `certgen handover cert-manager`
/// handed over (cert-manager keeps a certificate that already matches its `Certificate`, so it
/// may not have issued yet), the Certificate of the Secret's own name that the hand-over made.
pub fn certificate_of<'a>(
    annotations: &'a BTreeMap<String, String>,
    name: &'a str,
) -> Option<&'a str> {
    annotations
        .get(CERTIFICATE_NAME)
        .map(String::as_str)
        .or_else(|| annotations.contains_key(HANDED_OVER).then_some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_injectors_own_rules() {
        assert_eq!(injected(&annotations(&[])), None);
        assert_eq!(
            injected(&annotations(&[("cert-manager.io/other", "x")])),
            None
        );
        let i = injected(&annotations(&[(INJECT_CA_FROM, "ns/cert")])).unwrap();
        assert_eq!(i.to_string(), "cert-manager.io/inject-ca-from: ns/cert");
        // Present is enough, whatever the value (the injector then reports the bad value).
        assert!(injected(&annotations(&[(INJECT_CA_FROM_SECRET, "")])).is_some());
        assert!(injected(&annotations(&[(INJECT_APISERVER_CA, "true")])).is_some());
        assert_eq!(
            injected(&annotations(&[(INJECT_APISERVER_CA, "false")])),
            None
        );
        assert_eq!(
            injected(&annotations(&[(INJECT_APISERVER_CA, "yes")])),
            None
        );
    }

    #[test]
    fn the_certificate_of_a_secret() {
        assert_eq!(certificate_of(&annotations(&[]), "s"), None);
        assert_eq!(
            certificate_of(&annotations(&[(CERTIFICATE_NAME, "c")]), "s"),
            Some("c")
        );
        // Handed over, before cert-manager issued into it.
        assert_eq!(
            certificate_of(&annotations(&[(HANDED_OVER, "envoy-gateway")]), "s"),
            Some("s")
        );
        assert_eq!(
            certificate_of(
                &annotations(&[(HANDED_OVER, "envoy-gateway"), (CERTIFICATE_NAME, "c")]),
                "s"
            ),
            Some("c")
        );
    }
}
