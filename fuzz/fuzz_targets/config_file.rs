//! The config file reader on regular files, oversized files, FIFOs, sockets, directories and
//! links. The check and its input format: `certgen_fuzz::config_file` in `fuzz/src/lib.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certgen_fuzz::config_file(data));
