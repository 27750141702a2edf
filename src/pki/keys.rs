//! Key generation for a whole run at once, spread over the cores.
//!
//! The keys of one run are independent of each other (the CA's key signs the leaves'
//! certificates, not their keys), so they can be generated side by side. RSA key generation is
//! a prime search costing tens to hundreds of milliseconds per key; on two cores, five RSA-2048
//! keys take about half the time in parallel. Elliptic-curve keys take microseconds, less than
//! starting a thread, so a batch without RSA stays on the calling thread. Pure: no files, no
//! network, no clock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::KeyPair;

use super::{IssueError, KeyAlgorithm};

/// Generates one key per entry of `algorithms`, in the same order, on up to
/// `std::thread::available_parallelism()` threads when any of them is RSA.
pub fn generate_keys(algorithms: &[KeyAlgorithm]) -> Result<Vec<KeyPair>, IssueError> {
    // Without RSA there is nothing to spread; asking for the parallelism first would read the
    // cgroup's CPU quota from /proc and /sys (a dozen system calls) on every run for nothing.
    if !algorithms.iter().any(|a| a.is_rsa()) {
        return algorithms.iter().map(|a| a.generate()).collect();
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(algorithms.len());
    if threads <= 1 {
        return algorithms.iter().map(|a| a.generate()).collect();
    }
    // Each thread takes the next key still to be made, so one slow prime search does not hold
    // up keys queued behind it on the same thread.
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<KeyPair, IssueError>>>> =
        algorithms.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(algorithm) = algorithms.get(i) else {
                        break;
                    };
                    let key = algorithm.generate();
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(key);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every slot is filled before the scope ends")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_back_in_order_with_their_algorithms() {
        let algorithms = [
            KeyAlgorithm::Rsa2048,
            KeyAlgorithm::EcdsaP256,
            KeyAlgorithm::Rsa2048,
            KeyAlgorithm::Ed25519,
            KeyAlgorithm::EcdsaP384,
        ];
        let keys = generate_keys(&algorithms).unwrap();
        assert_eq!(keys.len(), algorithms.len());
        let expected = [
            &rcgen::PKCS_RSA_SHA256,
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_RSA_SHA256,
            &rcgen::PKCS_ED25519,
            &rcgen::PKCS_ECDSA_P384_SHA384,
        ];
        for (key, alg) in keys.iter().zip(expected) {
            assert!(key.is_compatible(alg), "{:?}", key.algorithm());
        }
        // Independent keys: no two alike.
        let mut ders: Vec<String> = keys.iter().map(|k| k.public_key_pem()).collect();
        ders.sort();
        ders.dedup();
        assert_eq!(ders.len(), keys.len());
    }

    #[test]
    fn an_empty_batch_is_empty() {
        assert!(generate_keys(&[]).unwrap().is_empty());
    }
}
