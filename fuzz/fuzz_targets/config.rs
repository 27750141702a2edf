//! `ConfigFile::parse` and `Config::resolve` on arbitrary text.
//! The check and its input format: `certgen_fuzz::config` in `fuzz/src/lib.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certgen_fuzz::config(data));
