//! Compiles each built-in profile (`profiles/*.yaml`) to JSON in `OUT_DIR`.
//!
//! Parsing the default profile's YAML was about 4 % of a whole `certgen --local` run (~0.1 ms of
//! ~2.5 ms: the YAML scanner and parser, for 90 lines). The run now reads the same profile as
//! JSON, which `serde_json` parses in microseconds. The YAML stays the only source: it is what
//! `certgen profile show` prints and what people copy, and a unit test
//! (`config::tests::builtin_profiles_read_the_same_as_json_and_yaml`) checks that both forms
//! give the same configuration.

use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=profiles");
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    let mut entries: Vec<_> = std::fs::read_dir("profiles")
        .expect("profiles/ exists")
        .map(|e| e.expect("profiles/ is readable").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).expect("a profile is UTF-8");
        let value: serde_json::Value = serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not valid YAML: {e}", path.display()));
        let name = path.file_stem().expect("a profile has a name");
        let json = serde_json::to_string(&value).expect("JSON values serialize");
        std::fs::write(Path::new(&out).join(name).with_extension("json"), json)
            .expect("OUT_DIR is writable");
    }
}
