//! The module layout of `src/` keeps its shape: no two top-level modules import each other,
//! even through others, and the core (observe, plan, apply, report, check, pki, config, the
//! metrics' exposition and what they use) never reaches the Kubernetes adapter (`src/k8s/`). The core and the driver
//! (`rotation`, the run lock, and the seams they act through, `outside`) never name a Kubernetes client type
//! (`kube`, `k8s_openapi`): they see the cluster only through the seams. `config` never
//! imports the command line (`cli`), nor does `kwc`: clap's types stop there. Nothing calls back into the
//! crate root (`src/lib.rs`: parsing, logging, dispatch): the runtime layer (`src/run/`) is
//! where commands' jobs are wired, and every module reaches it, not the root.
//!
//! The import graph is read from the sources: every `crate::MODULE` path (and, in the crate
//! root, every `MODULE::` path) of a top-level module's files, test code excluded.
//! `cargo test --test it layout -- --nocapture` prints it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The modules that must not reach the adapter, directly or through others.
const CORE: &[&str] = &[
    "observe",
    "plan",
    "apply",
    "report",
    "check",
    "pki",
    "config",
    "secret",
    "store",
    "kwc",
    "workload",
    "rollout",
    "lock",
    "exposition",
];

/// The Kubernetes adapter.
const ADAPTER: &str = "k8s";

/// Modules that must not name the Kubernetes client's types: the core, the driver and its
/// seams (with the workload kinds and rollout decisions the workload seam carries).
const NO_KUBE_TYPES: &[&str] = &[
    "observe", "plan", "apply", "report", "check", "pki", "config", "secret", "store", "kwc",
    "rotation", "outside", "workload", "rollout", "lock",
];

/// The crates of the Kubernetes client, as a path names them.
const KUBE_CRATES: &[&str] = &["kube", "k8s_openapi"];

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`, with the top-level module it belongs to.
fn files(src: &Path, dir: &Path, out: &mut Vec<(String, std::path::PathBuf)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).unwrap();
            let first = rel.components().next().unwrap().as_os_str();
            let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
            out.push((module, path));
        }
    }
}

/// The code of a file without its tests and comments.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Module names used as paths in `code`: `crate::NAME` and, with `bare`, `NAME::` too.
fn uses(code: &str, modules: &BTreeSet<String>, bare: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map(str::to_string)
            .collect()
    };
    // `crate::a::b`, and `use crate::{a::{b, c}, d}`: the first word of each item at depth 0.
    for part in code.split("crate::").skip(1) {
        let Some(group) = part.strip_prefix('{') else {
            out.extend(words(part).into_iter().next());
            continue;
        };
        for item in group_items(group) {
            out.extend(words(item.trim()).into_iter().next());
        }
    }
    if bare {
        for m in modules {
            let needle = format!("{m}::");
            let found = code.match_indices(&needle).any(|(i, _)| {
                !code[..i]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if found {
                out.insert(m.clone());
            }
        }
    }
    out.retain(|m| modules.contains(m));
    out
}

/// The Kubernetes client crates `code` names: `kube::…`, `k8s_openapi::…` (as a path's first
/// segment, or after `::` as in `::kube::…`), or `use kube;`.
fn kube_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for krate in KUBE_CRATES {
        for (i, _) in code.match_indices(krate) {
            let before = code[..i].chars().next_back();
            let after = &code[i + krate.len()..];
            let starts = !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !code[..i].ends_with("crate::")
                && !code[..i].ends_with("self::")
                && !code[..i].ends_with("super::");
            if starts && (after.starts_with("::") || after.starts_with(';')) {
                out.insert(krate.to_string());
            }
        }
    }
    out
}

/// Each module of `NO_KUBE_TYPES` that names a Kubernetes client crate, with the files.
fn kube_users() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &src, &mut all);
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &all {
        if !NO_KUBE_TYPES.contains(&module.as_str())
            || path.file_name().is_some_and(|f| f == "tests.rs")
        {
            continue;
        }
        let text = code(&std::fs::read_to_string(path).unwrap());
        for krate in kube_paths(&text) {
            let rel = path.strip_prefix(&src).unwrap().display().to_string();
            out.entry(rel).or_default().insert(krate);
        }
    }
    out
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &src, &mut all);
    let modules: BTreeSet<String> = all.iter().map(|(m, _)| m.clone()).collect();
    let mut graph: Graph = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (module, path) in &all {
        if path.file_name().is_some_and(|f| f == "tests.rs") {
            continue;
        }
        let text = code(&std::fs::read_to_string(path).unwrap());
        let root = module == "lib";
        for used in uses(&text, &modules, root) {
            if used != *module {
                graph.get_mut(module).unwrap().insert(used);
            }
        }
    }
    graph
}

/// Every module `from` reaches, itself excluded unless through a cycle.
fn reach(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = graph[from].iter().map(String::as_str).collect();
    while let Some(m) = todo.pop() {
        if seen.insert(m.to_string()) {
            todo.extend(graph[m].iter().map(String::as_str));
        }
    }
    seen
}

#[test]
fn no_module_imports_one_that_imports_it() {
    let graph = graph();
    for (module, used) in &graph {
        let list: Vec<&str> = used.iter().map(String::as_str).collect();
        println!("{module} -> {}", list.join(", "));
    }
    assert!(graph.len() > 10 && graph["lib"].len() > 5, "{graph:?}");
    let cyclic: Vec<&String> = graph
        .keys()
        .filter(|m| reach(&graph, m).contains(*m))
        .collect();
    assert!(
        cyclic.is_empty(),
        "import cycles through {cyclic:?}: {graph:#?}"
    );
}

#[test]
fn the_core_never_reaches_the_kubernetes_adapter() {
    let graph = graph();
    assert!(graph.contains_key(ADAPTER), "{graph:?}");
    for core in CORE {
        let reached = reach(&graph, core);
        assert!(
            !reached.contains(ADAPTER),
            "{core} reaches {ADAPTER} (it reaches {reached:?})"
        );
    }
    // The check bites: the crate root wires the adapter in.
    assert!(reach(&graph, "lib").contains(ADAPTER));
}

#[test]
fn the_core_and_the_driver_never_name_a_kubernetes_type() {
    let users = kube_users();
    assert!(
        users.is_empty(),
        "these files of the core or the driver name the Kubernetes client's crates (go through a seam in src/outside.rs instead): {users:?}"
    );
    // The check bites: the adapter names them.
    let adapter =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/k8s/pods.rs"))
            .unwrap();
    assert!(kube_paths(&code(&adapter)).contains("kube"));
}

#[test]
fn config_never_imports_the_command_line() {
    let graph = graph();
    // `kwc` validates `create` and `patch`'s flags as plain values, like `config` the run's.
    for core in ["config", "kwc"] {
        let reached = reach(&graph, core);
        assert!(
            !reached.contains("cli"),
            "{core} reaches cli (it reaches {reached:?}): the command line converts its arguments (src/cli/resolve.rs)"
        );
    }
    // The check bites: the crate root reads the command line.
    assert!(reach(&graph, "lib").contains("cli"));
}

#[test]
fn the_reader_sees_kubernetes_paths() {
    assert_eq!(
        kube_paths("use kube::Client;\nfn f(d: &k8s_openapi::api::apps::v1::Deployment) {}"),
        ["k8s_openapi", "kube"].map(String::from).into()
    );
    assert_eq!(kube_paths("fn f(x: ::kube::Client) {}").len(), 1);
    assert!(kube_paths("use crate::k8s::kube_like; let kube = 1; mykube::x();").is_empty());
    assert!(kube_paths("crate::kube::x(); self::kube::y();").is_empty());
}

#[test]
fn the_reader_sees_crate_paths_and_grouped_imports() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d"].map(String::from).into();
    let text = "use crate::a::X;\nuse crate::{b::Y, c};\nfn f() { d::g(); xd::h(); }";
    assert_eq!(
        uses(text, &modules, false),
        ["a", "b", "c"].map(String::from).into()
    );
    assert!(uses(text, &modules, true).contains("d"));
    let nested = "use crate::{a::{X, Y}, b::Z};";
    assert_eq!(
        uses(nested, &modules, false),
        ["a", "b"].map(String::from).into()
    );
    let commented =
        code("// crate::a\nfn f() {} // c::x\n#[cfg(test)]\nmod tests {\nuse crate::b;");
    assert_eq!(uses(&commented, &modules, true), BTreeSet::new());
}

/// The functions the crate root defines (`src/lib.rs`).
fn root_functions() -> BTreeSet<String> {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    code(&lib)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start_matches("pub ").trim_start_matches("async ");
            let name = l.strip_prefix("fn ")?;
            Some(name.split(['(', '<']).next()?.to_string())
        })
        .collect()
}

/// Which files name `crate::F` for a function `F` of the crate root.
fn calls_into_the_root(functions: &BTreeSet<String>) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &src, &mut all);
    let mut found = Vec::new();
    for (module, path) in &all {
        if module == "lib" || module == "main" {
            continue;
        }
        let text = code(&std::fs::read_to_string(path).unwrap());
        for f in functions {
            let pat = format!("crate::{f}");
            let named = text.match_indices(&pat).any(|(i, _)| {
                !text[i + pat.len()..]
                    .starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if named {
                found.push(format!("{} calls crate::{f}", path.display()));
            }
        }
    }
    found
}

#[test]
fn nothing_calls_back_into_the_crate_root() {
    let functions = root_functions();
    // The check bites: the root's own functions are found.
    assert!(
        functions.contains("dispatch") && functions.contains("runtime"),
        "{functions:?}"
    );
    let found = calls_into_the_root(&functions);
    assert!(
        found.is_empty(),
        "the crate root is the top: move what is called into src/run/ ({found:?})"
    );
}

/// The folders whose files must not reach back up: no file imports from the module that
/// contains it (an item of an enclosing `mod.rs`), and no two files of one folder import each
/// other, even through others (a sibling above it).
const NO_ARROWS_UP: &[&str] = &["rotation", "rotation/gate"];

/// A module path inside the crate, as segments (`["rotation", "gate", "push"]`).
type ModPath = Vec<String>;

/// The module path a file under `src/` defines (`rotation/gate/mod.rs` → rotation, gate).
fn module_path(rel: &Path) -> ModPath {
    let mut segs: ModPath = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    segs
}

/// Every path `code` names from `crate::`, `super::` or `self::`, resolved to absolute
/// segments from the crate root, as far as it names identifiers (a group `{a::X, b}` gives one
/// path per item). `here`: the module the code is in.
fn paths(code: &str, here: &[String]) -> Vec<ModPath> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let text = code;
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in text.match_indices(start) {
            let before = text[..i].chars().next_back();
            if before.is_some_and(|c| ident(c) || c == ':') {
                continue;
            }
            // The base, with every leading `super::`.
            let mut base: ModPath = match start {
                "crate::" => Vec::new(),
                "self::" => here.to_vec(),
                _ => here[..here.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &text[i + start.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            out.extend(expand(base, rest));
        }
    }
    out
}

/// The items of a `use` group whose `{` came just before `group`, split at its commas of depth
/// 0, up to its closing `}` (each as written, nested groups whole).
fn group_items(group: &str) -> Vec<String> {
    let mut items = Vec::new();
    let (mut depth, mut item) = (0, String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items
}

/// The paths `rest` names after `prefix`: identifiers joined by `::`, and a group `{a::X, b}`
/// at any depth expanded into one path per item (`self` in a group names the module itself).
fn expand(prefix: ModPath, rest: &str) -> Vec<ModPath> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut path = prefix;
    let mut rest = rest.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            return group_items(group)
                .iter()
                .flat_map(|i| expand(path.clone(), i))
                .collect();
        }
        let end = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        if &rest[..end] != "self" {
            path.push(rest[..end].to_string());
        }
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    vec![path]
}

/// The arrows back up inside the folders of [`NO_ARROWS_UP`], from the sources under `src`:
/// each as "file: what it names, and why that runs back up".
fn arrows_up(src: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(src, src, &mut all);
    let tests = |p: &Path| {
        p.file_name()
            .is_some_and(|f| f.to_string_lossy().ends_with("tests.rs"))
    };
    let sources: Vec<(ModPath, String, String)> = all
        .iter()
        .filter(|(_, p)| !tests(p))
        .map(|(_, p)| {
            let rel = p.strip_prefix(src).unwrap();
            (
                module_path(rel),
                rel.display().to_string(),
                code(&std::fs::read_to_string(p).unwrap()),
            )
        })
        .collect();
    let modules: BTreeSet<ModPath> = sources.iter().map(|(m, _, _)| m.clone()).collect();
    let mut found = Vec::new();
    for folder in NO_ARROWS_UP {
        let folder: ModPath = folder.split('/').map(str::to_string).collect();
        let inside = |m: &ModPath| m.len() > folder.len() && m.starts_with(&folder);
        // Sibling → sibling, by the folder's children each file belongs to.
        let mut graph: Graph = BTreeMap::new();
        for (here, file, code) in sources.iter().filter(|(m, _, _)| inside(m)) {
            let child = here[folder.len()].clone();
            graph.entry(child.clone()).or_default();
            for path in paths(code, here) {
                if !path.starts_with(&folder) {
                    continue;
                }
                // The module the path ends in: its longest prefix that is a module.
                let target = (0..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|p| modules.contains(p) || *p == folder)
                    .unwrap_or_default();
                if here.starts_with(&target) && target.len() < here.len() {
                    found.push(format!(
                        "{file}: {} is defined in {}, which contains it",
                        path.join("::"),
                        target.join("/")
                    ));
                } else if inside(&target) && target[folder.len()] != child {
                    graph
                        .entry(child.clone())
                        .or_default()
                        .insert(target[folder.len()].clone());
                }
            }
        }
        for m in graph.keys().cloned().collect::<Vec<_>>() {
            for n in graph[&m].clone() {
                graph.entry(n).or_default();
            }
        }
        for m in graph.keys() {
            if reach(&graph, m).contains(m) {
                found.push(format!(
                    "{}/{m} imports a sibling that imports it back (through {:?})",
                    folder.join("/"),
                    reach(&graph, m)
                ));
            }
        }
    }
    found
}

#[test]
fn nothing_inside_the_driver_and_the_gate_imports_back_up() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = arrows_up(&src);
    assert!(
        found.is_empty(),
        "arrows that run back up (move what is shared into a leaf module the container re-exports, as rotation/invocation.rs): {found:#?}"
    );
}

#[test]
fn the_reader_resolves_super_and_crate_paths() {
    let here: ModPath = ["rotation", "gate", "push"].map(String::from).into();
    let found = paths(
        "use super::evidence::{Evidence, X};\nuse super::super::Invocation;\nuse crate::rotation::{step::Outcome, gate::{self, Y}};\nfn f() { super::CLEANUP_WAIT; self::g(); }",
        &here,
    );
    let s: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    for want in [
        "rotation::gate::evidence::Evidence",
        "rotation::Invocation",
        "rotation::step::Outcome",
        "rotation::gate",
        "rotation::gate::CLEANUP_WAIT",
        "rotation::gate::push::g",
    ] {
        assert!(s.contains(&want.to_string()), "{want} not in {s:?}");
    }
}
