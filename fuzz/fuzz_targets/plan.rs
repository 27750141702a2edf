//! The planner on arbitrary stored Secrets of the envoy-gateway profile.
//! The check and its input format: `certgen_fuzz::plan` in `fuzz/src/lib.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certgen_fuzz::plan(data));
