//! Signature checks remembered for the life of the process.
//!
//! Whether a signature verifies depends on nothing but the algorithm, the public key, the signed
//! bytes and the signature. certgen asks the same question many times in one process: the
//! planner whether a CA signed a leaf (for each rule that needs it), the verifier once for every
//! state a consumer may hold (each a path through the same few signatures), the exporter at every
//! scrape. An answer is kept under a SHA-256 of all of its inputs, so it is reused only for the
//! very same question: a different byte anywhere is a new check. The memory is bounded: past
//! [`CAPACITY`] answers it starts over.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use rustls_pki_types::{AlgorithmIdentifier, InvalidSignature, SignatureVerificationAlgorithm};
use sha2::{Digest, Sha256};

/// How many answers are kept before the memory starts over: about 3 MB at most, far more than a
/// run asks (a rotation's states hold a few dozen signatures).
const CAPACITY: usize = 1 << 16;

static ANSWERS: LazyLock<Mutex<HashMap<[u8; 32], bool>>> = LazyLock::new(Mutex::default);

/// rustls-webpki's signature algorithms, each answering from the memory when it can.
pub(super) static ALGS: LazyLock<Vec<&'static dyn SignatureVerificationAlgorithm>> =
    LazyLock::new(|| {
        webpki::ALL_VERIFICATION_ALGS
            .iter()
            .map(|&alg| -> &'static dyn SignatureVerificationAlgorithm {
                Box::leak(Box::new(Remembering(alg)))
            })
            .collect()
    });

/// The key of a question: SHA-256 over its parts, each preceded by its length, so that no two
/// different questions share a key.
pub(super) fn question(parts: &[&[u8]]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

/// The answer to `question`: remembered, or `check`'s (then remembered). `check` runs outside the
/// lock, so two threads may both check a new question; they get the same answer.
pub(super) fn remembered(question: [u8; 32], check: impl FnOnce() -> bool) -> bool {
    if let Some(&answer) = answers().get(&question) {
        return answer;
    }
    let answer = check();
    let mut answers = answers();
    if answers.len() >= CAPACITY {
        answers.clear();
    }
    answers.insert(question, answer);
    answer
}

fn answers() -> MutexGuard<'static, HashMap<[u8; 32], bool>> {
    // A map of plain answers is whole even if a holder panicked.
    ANSWERS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One of rustls-webpki's algorithms, its answers remembered.
#[derive(Debug)]
struct Remembering(&'static dyn SignatureVerificationAlgorithm);

impl SignatureVerificationAlgorithm for Remembering {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        let alg = self.0;
        let asked = question(&[
            b"webpki",
            alg.public_key_alg_id().as_ref(),
            alg.signature_alg_id().as_ref(),
            public_key,
            message,
            signature,
        ]);
        let valid = remembered(asked, || {
            alg.verify_signature(public_key, message, signature).is_ok()
        });
        if valid { Ok(()) } else { Err(InvalidSignature) }
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        self.0.public_key_alg_id()
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        self.0.signature_alg_id()
    }

    fn fips(&self) -> bool {
        self.0.fips()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{CaSpec, KeyAlgorithm, issue_ca};

    #[test]
    fn a_remembered_answer_is_reused_only_for_the_same_question() {
        let spec = CaSpec {
            common_name: "memo".into(),
            validity: std::time::Duration::from_secs(86_400),
            key_algorithm: KeyAlgorithm::EcdsaP256,
        };
        let (ca, _) = issue_ca(&spec, time::OffsetDateTime::now_utc()).unwrap();
        let (_, x509) = x509_parser::parse_x509_certificate(ca.cert.der()).unwrap();
        let message = x509.tbs_certificate.as_ref();
        let signature = x509.signature_value.data.as_ref();
        let key = x509.public_key().subject_public_key.data.as_ref();
        let alg = ALGS
            .iter()
            .find(|a| a.signature_alg_id() == rustls_pki_types::alg_id::ECDSA_SHA256)
            .unwrap();

        // Asked twice, valid twice: the second from the memory.
        assert!(alg.verify_signature(key, message, signature).is_ok());
        assert!(alg.verify_signature(key, message, signature).is_ok());
        // One byte changed anywhere is a new question, checked, and refused.
        let mut other_message = message.to_vec();
        other_message[10] ^= 1;
        assert!(
            alg.verify_signature(key, &other_message, signature)
                .is_err()
        );
        let mut other_signature = signature.to_vec();
        let last = other_signature.len() - 1;
        other_signature[last] ^= 1;
        assert!(
            alg.verify_signature(key, message, &other_signature)
                .is_err()
        );
        // And the memory did not swallow the answer it had.
        assert!(alg.verify_signature(key, message, signature).is_ok());
    }

    #[test]
    fn questions_differ_when_their_parts_are_split_differently() {
        assert_ne!(question(&[b"ab", b"c"]), question(&[b"a", b"bc"]));
        assert_eq!(question(&[b"ab", b"c"]), question(&[b"ab", b"c"]));
    }
}
