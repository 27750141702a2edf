//! Local mode's power-cut promises, checked on the system calls of real runs. certgen runs under
//! `strace -f -y` (every thread; each descriptor shown with its path) and a model replays the
//! calls: which files and directory entries are on disk (fsynced after their last change) and
//! which may still be only in memory. A power cut may come after any call, and the file system
//! may write out any change at any moment, so whatever a change makes reachable must be on disk
//! before that change is made. Checked at every call of the run:
//!
//! - no torn Secret: when `..data` is switched to a version, every file of the version, the
//!   version directory's entries and the version's name in the Secret's directory are on disk;
//! - order: when another Secret's `..data` is switched, the CA Secret's last switch (and its
//!   directory's name in `DIR`) is on disk;
//! - an old version is removed only once the switch away from it is on disk;
//! - at exit, everything the run made or changed is on disk, the directories it made for `DIR`
//!   included (only removals and the lock file may still be in memory: a lost removal leaves an
//!   old version the next write removes);
//! - no `sync` or `syncfs`: a run writes out its own files only, not its neighbours'.
//!
//! Not checked here (docs/durability.md): that the kernel and the device keep what fsync
//! reported as written (that needs a real power cut, or a block device that records and
//! replays writes); the model only knows what fsync promises.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{certgen, tempdir};

/// A directory entry made or removed since its directory's last fsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Made,
    Removed,
}

/// What the calls so far left on disk and in memory.
#[derive(Default)]
struct Model {
    /// Files written since their last fsync (created counts as written).
    unsynced_files: BTreeSet<PathBuf>,
    /// Per directory, the entries changed since its last fsync.
    unsynced_entries: BTreeMap<PathBuf, BTreeMap<String, Change>>,
    /// Symbolic links by path, to their targets (as the run made them).
    links: HashMap<PathBuf, String>,
    /// Every `..data` switch: (Secret directory, version).
    switches: Vec<(PathBuf, String)>,
    /// Promises broken, with the call that broke them.
    broken: Vec<String>,
}

impl Model {
    fn entry_unsynced(&self, path: &Path) -> bool {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return false;
        };
        self.unsynced_entries
            .get(dir)
            .is_some_and(|e| e.contains_key(&*name.to_string_lossy()))
    }

    fn change(&mut self, path: &Path, change: Change) {
        let (dir, name) = (path.parent().unwrap(), path.file_name().unwrap());
        self.unsynced_entries
            .entry(dir.to_path_buf())
            .or_default()
            .insert(name.to_string_lossy().into_owned(), change);
    }

    /// `..data` in `secret` now points to `version`, by `call`; `ca` is the CA Secret's directory.
    fn switched(&mut self, secret: &Path, version: &str, ca: &Path, call: &str) {
        let vdir = secret.join(version);
        let mut problems = Vec::new();
        if let Some(f) = self.unsynced_files.iter().find(|f| f.starts_with(&vdir)) {
            problems.push(format!("{} is not on disk", f.display()));
        }
        if let Some(e) = self.unsynced_entries.get(&vdir).filter(|e| !e.is_empty()) {
            problems.push(format!(
                "the names {:?} in {} are not on disk",
                e.keys(),
                vdir.display()
            ));
        }
        if self.entry_unsynced(&vdir) {
            problems.push(format!("the name of {} is not on disk", vdir.display()));
        }
        if secret != ca && self.switches.iter().any(|(s, _)| s == ca) {
            if self.entry_unsynced(&ca.join("..data")) {
                problems.push("the CA Secret's switch is not on disk".into());
            }
            if self.entry_unsynced(ca) {
                problems.push("the CA Secret's directory is not on disk".into());
            }
        }
        for p in problems {
            self.broken.push(format!("{call}: {p}"));
        }
        self.switches
            .push((secret.to_path_buf(), version.to_string()));
    }

    /// `path` was removed by `call`: if it is, or is in, a version directory `..data` no longer
    /// points to, the switch away from it must be on disk.
    fn removed(&mut self, path: &Path, call: &str) {
        for dir in path.ancestors().skip(1) {
            let Some(target) = self.links.get(&dir.join("..data")) else {
                continue;
            };
            let Ok(rest) = path.strip_prefix(dir) else {
                continue;
            };
            let version = rest
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            if version.starts_with("..")
                && version != "..data"
                && *target != version
                && self.entry_unsynced(&dir.join("..data"))
            {
                self.broken.push(format!(
                    "{call}: removes an old version before the switch away from it is on disk"
                ));
            }
            break;
        }
        self.change(path, Change::Removed);
        self.unsynced_files.retain(|f| !f.starts_with(path));
        self.unsynced_entries.retain(|d, _| !d.starts_with(path));
        self.links.retain(|l, _| !l.starts_with(path));
    }

    /// What is still only in memory at exit, under `under`: files and made entries (not
    /// removals, not the lock file).
    fn in_memory_at_exit(&self, under: &Path) -> Vec<String> {
        let files = self
            .unsynced_files
            .iter()
            .filter(|f| f.starts_with(under) && !f.ends_with(".certgen.lock"))
            .map(|f| format!("{} (its data)", f.display()));
        let entries = self.unsynced_entries.iter().flat_map(|(dir, e)| {
            e.iter()
                .filter(|(name, change)| **change == Change::Made && *name != ".certgen.lock")
                .map(move |(name, _)| format!("{} (its name)", dir.join(name).display()))
        });
        files.chain(entries).collect()
    }
}

/// The arguments of a traced call, split at top-level commas.
fn args(text: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quoted, mut escaped) =
        (vec![], String::new(), 0, false, false);
    for c in text.chars() {
        if quoted {
            cur.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '{' | '[' | '<' | '(' => depth += 1,
            '}' | ']' | '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The path in a descriptor shown by `-y` (`5</tmp/x/envoy>`).
fn fd_path(arg: &str) -> Option<PathBuf> {
    let start = arg.find('<')?;
    Some(PathBuf::from(&arg[start + 1..arg.rfind('>')?]))
}

/// A quoted name (`"..data"`).
fn name(arg: &str) -> String {
    arg.trim_matches('"').to_string()
}

/// Replays the trace in `log` (`strace -f -y -qq -o`) and returns the broken promises; `ca` is
/// the CA Secret's directory, `under` the directory whose files the run must leave on disk.
fn replay(log: &str, ca: &Path, under: &Path) -> (Model, Vec<String>) {
    let mut model = Model::default();
    let mut unfinished: HashMap<String, String> = HashMap::new();
    for line in log.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let call = if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            unfinished.insert(pid.to_string(), head.to_string());
            continue;
        } else if rest.starts_with("<...") {
            let Some((_, tail)) = rest.split_once("resumed>") else {
                continue;
            };
            unfinished.remove(pid).unwrap_or_default() + tail
        } else {
            rest.to_string()
        };
        // `name(args) = result`, strace aligning the `=` with spaces.
        let (Some((func, _)), Some(eq)) = (call.split_once('('), call.rfind(" = ")) else {
            continue;
        };
        let Some(inside) = call[func.len() + 1..eq].trim_end().strip_suffix(')') else {
            continue;
        };
        let (argv, ret) = (args(inside), &call[eq + 3..]);
        if ret.starts_with('-') || ret.starts_with('?') {
            continue; // failed: changed nothing
        }
        let at = |dir: usize, file: usize| -> Option<PathBuf> {
            Some(fd_path(argv.get(dir)?)?.join(name(argv.get(file)?)))
        };
        match func {
            "sync" | "syncfs" => {
                // Everything is on disk then, but at the price of the neighbours' data too.
                model.unsynced_files.clear();
                model.unsynced_entries.clear();
                model.broken.push(format!(
                    "{call}: syncs the whole file system (and waits for its neighbours' data)"
                ));
            }
            "open" | "openat" | "openat2" | "creat" => {
                // O_CREAT may have made the name (the lock file's already existed: it is left
                // out of the checks): counted as made.
                let flags = argv.get(if func.starts_with("openat") { 2 } else { 1 });
                if (func == "creat" || flags.is_some_and(|f| f.contains("O_CREAT")))
                    && let Some(path) = fd_path(ret)
                {
                    model.change(&path, Change::Made);
                    model.unsynced_files.insert(path);
                }
            }
            "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => {
                if let Some(path) = argv.first().and_then(|a| fd_path(a)) {
                    model.unsynced_files.insert(path);
                }
            }
            "fsync" | "fdatasync" => {
                if let Some(path) = argv.first().and_then(|a| fd_path(a)) {
                    model.unsynced_files.remove(&path);
                    model.unsynced_entries.remove(&path);
                }
            }
            "mkdir" => model.change(Path::new(&name(&argv[0])), Change::Made),
            "mkdirat" => {
                if let Some(p) = at(0, 1) {
                    model.change(&p, Change::Made);
                }
            }
            "symlinkat" | "symlink" => {
                let path = if func == "symlink" {
                    Some(PathBuf::from(name(&argv[1])))
                } else {
                    at(1, 2)
                };
                if let Some(path) = path {
                    let target = name(&argv[0]);
                    model.change(&path, Change::Made);
                    model.links.insert(path.clone(), target.clone());
                    if path.ends_with("..data") {
                        model.switched(path.parent().unwrap(), &target, ca, &call);
                    }
                }
            }
            "renameat" | "renameat2" | "rename" => {
                let (from, to) = if func == "rename" {
                    (
                        Some(PathBuf::from(name(&argv[0]))),
                        Some(PathBuf::from(name(&argv[1]))),
                    )
                } else {
                    (at(0, 1), at(2, 3))
                };
                if let (Some(from), Some(to)) = (from, to) {
                    let target = model.links.remove(&from);
                    model.change(&from, Change::Removed);
                    model.change(&to, Change::Made);
                    if let Some(target) = target {
                        model.links.insert(to.clone(), target.clone());
                        if to.ends_with("..data") {
                            model.switched(to.parent().unwrap(), &target, ca, &call);
                        }
                    }
                }
            }
            "unlinkat" => {
                if let Some(p) = at(0, 1) {
                    model.removed(&p, &call);
                }
            }
            "unlink" | "rmdir" => model.removed(Path::new(&name(&argv[0])), &call),
            _ => {}
        }
    }
    let mut broken = std::mem::take(&mut model.broken);
    broken.extend(
        model
            .in_memory_at_exit(under)
            .into_iter()
            .map(|p| format!("at exit: {p} is not on disk")),
    );
    (model, broken)
}

/// The calls that change files, directories and their durability.
const TRACED: &str = "trace=open,openat,openat2,creat,write,pwrite64,writev,pwritev,pwritev2,\
fsync,fdatasync,sync,syncfs,mkdir,mkdirat,symlink,symlinkat,rename,renameat,renameat2,unlink,\
unlinkat,rmdir";

/// Runs certgen `--local dir -q` with `extra` under strace, checks it exits 0, and returns the
/// broken promises and the model (for its switches), `under` being what must be on disk at exit.
fn traced_run(dir: &Path, extra: &[&str], under: &Path) -> (Model, Vec<String>) {
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.is_ok_and(|o| o.status.success()),
        "strace is needed to check local mode's fsyncs: run tests/testenv/deps"
    );
    let log = tempdir();
    let log = log.path().join("trace");
    let run = certgen();
    let out = Command::new("strace")
        .args(["-f", "-y", "-qq", "-s", "512", "-e", TRACED, "-o"])
        .arg(&log)
        .arg(run.get_program())
        .args(["--local", dir.to_str().unwrap(), "-q"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "certgen under strace failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(&log).unwrap();
    replay(&log, &dir.join("envoy-gateway-ca"), under)
}

/// The Secret directories switched, each once per switch.
fn switched(model: &Model) -> Vec<String> {
    let mut names: Vec<String> = model
        .switches
        .iter()
        .map(|(s, _)| s.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_fresh_install_is_on_disk_in_the_order_promised() {
    let tmp = tempdir();
    let (model, broken) = traced_run(tmp.path(), &[], tmp.path());
    assert_eq!(broken, Vec::<String>::new());
    assert_eq!(
        switched(&model),
        [
            "envoy",
            "envoy-gateway",
            "envoy-gateway-ca",
            "envoy-oidc-hmac",
            "envoy-rate-limit"
        ],
        "the trace shows every Secret's switch"
    );
}

#[test]
fn the_directories_a_run_makes_for_dir_are_on_disk() {
    let tmp = tempdir();
    let dir = tmp.path().join("new").join("certs");
    let (model, broken) = traced_run(&dir, &[], tmp.path());
    assert_eq!(broken, Vec::<String>::new());
    assert_eq!(model.switches.len(), 5);
}

#[test]
fn a_rotation_is_on_disk_in_the_order_promised_and_removes_versions_after_their_switch() {
    let tmp = tempdir();
    crate::util::run_local(tmp.path(), &[]).ok();
    let (model, broken) = traced_run(tmp.path(), &["--overwrite"], tmp.path());
    assert_eq!(broken, Vec::<String>::new());
    // Staged: trust (CA Secret and the 3 leaves' bundles), leaves (CA Secret's promotion and
    // the 3 leaves), cleanup (the same 4 again).
    let ca = switched(&model)
        .iter()
        .filter(|s| *s == "envoy-gateway-ca")
        .count();
    assert_eq!(
        (model.switches.len(), ca),
        (12, 3),
        "{:?}",
        switched(&model)
    );
}
