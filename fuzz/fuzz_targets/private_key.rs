//! `load_signing_key` and `CaKey::from_pem` on arbitrary key bytes.
//! The check and its input format: `certgen_fuzz::private_key` in `fuzz/src/lib.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certgen_fuzz::private_key(data));
