//! Pure PKI: key generation, issuing CAs and leaves, parsing PEM, and the trust-bundle rules.
//!
//! Whether a certificate is usable is decided by a real path verifier (rustls-webpki) in
//! `verify.rs`, with the few rules it leaves to its caller written down there.
//!
//! Nothing here touches files, the network or the clock: the caller passes `now`. CA and leaf
//! specifications are different types, so a leaf can never be issued with `keyCertSign`.
//! Private keys travel as [`SecretPem`], whose `Debug` never shows the key.

mod bundle;
mod cert;
mod issue;
mod keys;
mod memo;
mod verify;

pub use bundle::{
    BundleError, MAX_BUNDLE, check_bundle, choose_prior_ca, rotation_bundle, steady_bundle,
};
pub use cert::{Cert, CertError, KeyError, load_signing_key, parse_cert_chain, parse_single_cert};
pub use issue::{
    CaKey, CaSpec, IssueError, Issued, KeyAlgorithm, LeafSpec, Usages, bundle_pem, issue_ca,
    issue_ca_with_key, issue_leaf, issue_leaf_with_key,
};
pub use keys::generate_keys;
pub use verify::{Rejection, Verifier, anchor_problem, ca_shape_problem, leaf_shape_problem};

use std::fmt;

/// A PEM-encoded private key. Its `Debug` and `Display` are redacted so that a key can never end
/// up in a log line, an error message or a report by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretPem(String);

impl SecretPem {
    /// Wraps PEM text that holds a private key.
    pub fn new(pem: String) -> Self {
        Self(pem)
    }

    /// The PEM text, for writing to a Secret or a 0600 file, and nowhere else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretPem(<redacted>)")
    }
}

/// Random bytes from the operating system, for serial numbers and HMAC secrets.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).expect("the operating system's random number generator failed");
    buf
}

/// Lower-case hex of a byte string (fingerprints, serials).
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
