//! Certificate parsing and the trust-bundle rules on arbitrary bytes.
//! The check and its input format: `certgen_fuzz::pem_bundle` in `fuzz/src/lib.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certgen_fuzz::pem_bundle(data));
