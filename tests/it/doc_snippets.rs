//! The docs keep true: every shell snippet in README.md and `docs/` is run by a test, as
//! written, or says why it cannot be.
//!
//! A fenced block's info string says what it is (the first word is the language, for
//! highlighting; GitHub ignores the rest):
//!
//! - ```` ```sh test=local ````: run here, in order with the file's other local snippets, in a
//!   fresh directory that is also `$HOME`, with `certgen` (the binary under test) on `PATH`, and
//!   `cargo run [--release] -- ARGS` meaning `certgen ARGS` (the binary is already built);
//! - ```` ```sh test=cluster ````: run on the test control plane (`cluster::doc_snippets`), in
//!   order with the file's other cluster snippets, with `kubectl` and `helm` on `PATH` and
//!   `envoy-gateway-system` standing for a namespace of the test's own;
//! - ```` ```sh test=set ````: run over the three test control planes of `cluster::set`
//!   (`cluster::set::clustermesh`), with `KUBECONFIG` the set's (contexts `m0`, `m1`, `m2`),
//!   `kubectl` on `PATH` and `kube-system` standing for a namespace of the test's own in every
//!   member;
//! - ```` ```yaml test=apply ````: a manifest, applied with `kubectl apply -f -` on the test
//!   control plane in order with the file's cluster snippets (the same namespace swap), and
//!   deleted with the test's namespace (cluster-scoped objects by the same manifest);
//! - `as=USER` after `test=cluster` or `test=apply`: run as that identity (the API server's
//!   impersonation, in a kubeconfig of the test's own), as the Job or CronJob the page
//!   describes runs, so the page's RBAC is what is tested;
//! - ```` ```text test=output ````: what the snippet just before it prints, compared line by
//!   line after [`normalize`] (dates, times and fingerprints vary); a line `...` stands for any
//!   lines;
//! - ```` ```sh test=skip: REASON ````: not run, and why (a registry push, a real cluster).
//!
//! A `sh`, `bash`, `shell` or `console` block without `test=` fails
//! [`every_shell_snippet_says_how_it_is_tested`], so a new command cannot be documented without
//! being run or explained.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{root, tempdir};

/// How a snippet is tested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    Local,
    Cluster,
    /// Run over the set of three test control planes (contexts `m0`, `m1`, `m2`):
    /// `cluster::set::clustermesh`.
    Set,
    /// A manifest applied with kubectl, in order with the cluster snippets.
    Apply,
    Output,
    Skip(String),
    /// A shell block that says nothing: an error.
    Unmarked,
    /// Not a shell block (YAML, a table of text, ...): not run.
    Other,
}

/// One fenced block of a Markdown file.
#[derive(Debug, Clone)]
pub struct Snippet {
    pub file: PathBuf,
    /// 1-based line of the opening fence.
    pub line: usize,
    pub test: Test,
    /// `as=USER`: the identity it runs as (cluster snippets and manifests).
    pub identity: Option<String>,
    pub code: String,
}

impl Snippet {
    pub fn place(&self) -> String {
        format!(
            "{}:{}",
            self.file
                .strip_prefix(root())
                .unwrap_or(&self.file)
                .display(),
            self.line
        )
    }
}

/// README.md and every Markdown file under `docs/`, in a stable order.
pub fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = walk(&root().join("docs"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The fenced blocks of `file`.
pub fn snippets(file: &Path) -> Vec<Snippet> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    // The open block: its first line, fence, code so far, test and identity.
    type Open = (usize, String, String, (Test, Option<String>));
    let mut open: Option<Open> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let fence = "```".to_string();
                    open = Some((i + 1, fence, String::new(), info_string(info.trim())));
                }
            }
            Some((start, fence, code, (test, identity))) => {
                if trimmed.starts_with(fence.as_str()) && trimmed.trim() == fence.as_str() {
                    out.push(Snippet {
                        file: file.to_path_buf(),
                        line: *start,
                        test: test.clone(),
                        identity: identity.clone(),
                        code: std::mem::take(code),
                    });
                    open = None;
                } else {
                    code.push_str(line);
                    code.push('\n');
                }
            }
        }
    }
    assert!(
        open.is_none(),
        "{}: a fence is never closed",
        file.display()
    );
    out
}

/// The test of a block and, with `as=USER`, the identity it runs as.
fn info_string(info: &str) -> (Test, Option<String>) {
    let identity = info
        .split_whitespace()
        .find_map(|w| w.strip_prefix("as="))
        .map(str::to_string);
    let rest: Vec<&str> = info
        .split_whitespace()
        .filter(|w| !w.starts_with("as="))
        .collect();
    let test = classify(&rest.join(" "));
    assert!(
        identity.is_none() || matches!(test, Test::Cluster | Test::Apply),
        "as=USER is for test=cluster and test=apply: {info}"
    );
    (test, identity)
}

fn classify(info: &str) -> Test {
    let mut words = info.split_whitespace();
    let lang = words.next().unwrap_or("");
    let rest: Vec<&str> = words.collect();
    let rest = rest.join(" ");
    if let Some(t) = rest.strip_prefix("test=") {
        return match t {
            "local" => Test::Local,
            "cluster" => Test::Cluster,
            "set" => Test::Set,
            "apply" => Test::Apply,
            "output" => Test::Output,
            t => match t.strip_prefix("skip:") {
                Some(why) if !why.trim().is_empty() => Test::Skip(why.trim().to_string()),
                _ => panic!("unknown test={t} (local, cluster, set, apply, output, skip: REASON)"),
            },
        };
    }
    if matches!(lang, "sh" | "bash" | "shell" | "console") {
        Test::Unmarked
    } else {
        Test::Other
    }
}

/// What varies between runs, in place of itself: UUIDs, timestamps, dates, fingerprints,
/// durations in seconds, temporary paths.
pub fn normalize(text: &str) -> String {
    use std::sync::OnceLock;
    static RULES: OnceLock<Vec<(regex::Regex, &'static str)>> = OnceLock::new();
    let rules = RULES.get_or_init(|| {
        [
            (
                r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
                "<uuid>",
            ),
            (r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", "<time>"),
            (r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})?\b", "<time>"),
            (r"\b\d{4}-\d{2}-\d{2}\b", "<date>"),
            (r"\b[0-9a-f]{16,64}\b", "<hex>"),
            (r"\b\d+(\.\d+)?(ms|s)\b", "<secs>"),
            (r"/tmp/[^\s/]+", "/tmp/<dir>"),
        ]
        .into_iter()
        .map(|(re, to)| (regex::Regex::new(re).unwrap(), to))
        .collect()
    });
    text.lines()
        .map(|l| {
            let mut l = l.trim_end().to_string();
            for (re, to) in rules {
                l = re.replace_all(&l, *to).into_owned();
            }
            l
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `actual` matches `expected` line by line after [`normalize`], a line `...` in
/// `expected` standing for any number of lines. `Err` says where they part.
pub fn matches(expected: &str, actual: &str) -> Result<(), String> {
    let want: Vec<String> = normalize(expected).lines().map(str::to_string).collect();
    let got: Vec<String> = normalize(actual).lines().map(str::to_string).collect();
    fn go(want: &[String], got: &[String]) -> bool {
        match want.split_first() {
            None => got.is_empty(),
            Some((w, rest)) if w.trim() == "..." => (0..=got.len()).any(|i| go(rest, &got[i..])),
            Some((w, rest)) => got
                .split_first()
                .is_some_and(|(g, more)| g == w && go(rest, more)),
        }
    }
    if go(&want, &got) {
        Ok(())
    } else {
        Err(format!(
            "expected (normalized):\n{}\n\nactual (normalized):\n{}",
            want.join("\n"),
            got.join("\n")
        ))
    }
}

/// The directory holding the binary under test (also as `kube-webhook-certgen`), and a `cargo` that runs it: `cargo run
/// [--release] [--bin certgen] -- ARGS` is `certgen ARGS`, since the test already built it.
pub fn bin_dir(scratch: &Path) -> PathBuf {
    let bin = scratch.join(".doc-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let certgen = Path::new(env!("CARGO_BIN_EXE_certgen"));
    std::os::unix::fs::symlink(certgen, bin.join("certgen")).unwrap();
    // As certgen's image ships it, for the kube-webhook-certgen guide.
    std::os::unix::fs::symlink(certgen, bin.join("kube-webhook-certgen")).unwrap();
    std::fs::write(
        bin.join("cargo"),
        "#!/usr/bin/env bash\n\
         # The docs' `cargo run [--release] -- ARGS`: the binary under test is already built.\n\
         [ \"$1\" = run ] || { echo \"doc snippet: only cargo run is stood in for\" >&2; exit 97; }\n\
         shift\n\
         while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done\n\
         [ \"$1\" = -- ] && shift\n\
         exec certgen \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("cargo"), std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// The result of one snippet.
pub struct Ran {
    pub code: i32,
    pub output: String,
}

/// Runs `snippet` with bash (`set -eo pipefail`) in `cwd` with `env`, `path_first` before
/// `PATH`; standard output and error together, as a reader sees them in a terminal.
pub fn run(snippet: &Snippet, cwd: &Path, path_first: &[PathBuf], env: &[(&str, String)]) -> Ran {
    let mut path: Vec<PathBuf> = path_first.to_vec();
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let out = Command::new("bash")
        .args(["-eo", "pipefail", "-c"])
        .arg(format!("exec 2>&1\n{}", snippet.code))
        .current_dir(cwd)
        .env("PATH", std::env::join_paths(path).unwrap())
        .env("HOME", cwd)
        .env_remove("KUBECONFIG")
        .env_remove("CERTGEN_NAMESPACE")
        .env_remove("ENVOY_GATEWAY_NAMESPACE")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let ran = Ran {
        code: out.status.code().unwrap_or(-1),
        output: String::from_utf8_lossy(&out.stdout).into_owned(),
    };
    crate::util::assert_no_key_material(&ran.output);
    ran
}

/// Runs the snippets of `file` marked `test` (with [`Test::Cluster`], the manifests marked
/// [`Test::Apply`] too, applied with kubectl), in order, each followed by its expected output
/// if one comes next; returns the places run. `setup` prepares each snippet's text (a
/// namespace swapped in, say) and the expected output the same way; `identity` gives the
/// environment of a snippet marked `as=USER` (its `USER` after `setup`).
pub fn run_file(
    file: &Path,
    test: &Test,
    cwd: &Path,
    path_first: &[PathBuf],
    env: &[(&str, String)],
    setup: &dyn Fn(&str) -> String,
    identity: &dyn Fn(&str) -> Vec<(&'static str, String)>,
) -> Vec<String> {
    let all = snippets(file);
    let mut ran = Vec::new();
    for (i, s) in all.iter().enumerate() {
        let applied = *test == Test::Cluster && s.test == Test::Apply;
        if &s.test != test && !applied {
            continue;
        }
        let code = if applied {
            apply_command(&setup(&s.code))
        } else {
            setup(&s.code)
        };
        let snippet = Snippet { code, ..s.clone() };
        let mut env = env.to_vec();
        if let Some(user) = &s.identity {
            env.extend(identity(&setup(user)));
        }
        let r = run(&snippet, cwd, path_first, &env);
        assert_eq!(
            r.code,
            0,
            "{}: the snippet failed (exit {}):\n{}\n--- output:\n{}",
            s.place(),
            r.code,
            s.code,
            r.output
        );
        if let Some(expected) = all.get(i + 1).filter(|n| n.test == Test::Output)
            && let Err(e) = matches(&setup(&expected.code), &r.output)
        {
            panic!(
                "{}: the output shown at {} is not what the snippet prints:\n{e}",
                s.place(),
                expected.place()
            );
        }
        ran.push(s.place());
    }
    ran
}

/// The shell command that applies `manifest` with kubectl (a here-document, as written).
pub fn apply_command(manifest: &str) -> String {
    format!("kubectl apply -f - <<'CERTGEN_DOC_MANIFEST'\n{manifest}CERTGEN_DOC_MANIFEST\n")
}

#[test]
fn every_shell_snippet_says_how_it_is_tested() {
    let mut unmarked = Vec::new();
    let mut outputs_alone = Vec::new();
    let mut skipped = Vec::new();
    let mut counts = std::collections::BTreeMap::new();
    for file in doc_files() {
        let all = snippets(&file);
        for (i, s) in all.iter().enumerate() {
            let kind = match &s.test {
                Test::Unmarked => {
                    unmarked.push(s.place());
                    continue;
                }
                Test::Output => {
                    let after_run = i > 0
                        && matches!(
                            all[i - 1].test,
                            Test::Local | Test::Cluster | Test::Set | Test::Apply
                        );
                    if !after_run {
                        outputs_alone.push(s.place());
                    }
                    "output"
                }
                Test::Local => "local",
                Test::Cluster => "cluster",
                Test::Set => "set",
                Test::Apply => "apply",
                Test::Skip(why) => {
                    skipped.push(format!("{}: {why}", s.place()));
                    "skip"
                }
                Test::Other => continue,
            };
            *counts.entry(kind).or_insert(0) += 1;
        }
    }
    assert!(
        unmarked.is_empty(),
        "shell snippets without test=local|cluster|set|skip: REASON: {unmarked:?}"
    );
    assert!(
        outputs_alone.is_empty(),
        "test=output must follow the snippet whose output it is: {outputs_alone:?}"
    );
    eprintln!("doc snippets: {counts:?}");
    eprintln!("skipped, and why:\n  {}", skipped.join("\n  "));
}

#[test]
fn local_snippets_run_as_written() {
    let mut ran = Vec::new();
    for file in doc_files() {
        let dir = tempdir();
        let bin = bin_dir(dir.path());
        ran.extend(run_file(
            &file,
            &Test::Local,
            dir.path(),
            &[bin],
            &[],
            &|s| s.to_string(),
            &|user| panic!("as={user} is for cluster snippets"),
        ));
    }
    eprintln!("local doc snippets run ({}): {ran:?}", ran.len());
}

#[test]
fn the_normalized_match_takes_what_varies_and_nothing_else() {
    assert!(
        matches(
            "CA 0123456789abcdef valid until 2036-11-24T15:00:00Z\n...\ndone in 0.2s",
            "CA fedcba9876543210 valid until 2030-01-01T00:00:00Z\na\nb\ndone in 12ms"
        )
        .is_ok()
    );
    assert!(matches("envoy 1824d", "envoy 3649d").is_err());
    assert!(matches("a\nb", "a").is_err());
    assert_eq!(
        classify("sh test=skip: needs a registry"),
        Test::Skip("needs a registry".into())
    );
    assert_eq!(classify("console"), Test::Unmarked);
    assert_eq!(classify("yaml"), Test::Other);
    assert_eq!(
        info_string("sh test=cluster as=system:serviceaccount:ns:sa"),
        (Test::Cluster, Some("system:serviceaccount:ns:sa".into()))
    );
    assert_eq!(info_string("yaml test=apply"), (Test::Apply, None));
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation other than `-` and `_`
/// dropped (backticks, colons, apostrophes, arrows).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside fenced blocks), a repeated heading's
/// getting `-1`, `-2`, ... as on GitHub.
pub fn anchors(file: &Path) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    let mut out = std::collections::BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let s = slug(line.trim_start_matches('#'));
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// Every relative link of README.md and `docs/` leads to a file that exists and, with a
/// `#fragment` into Markdown, to a heading there: the reference moved out of the README, and
/// a link left pointing at a section that went elsewhere is a dead end for the reader.
#[test]
fn every_link_of_the_docs_leads_somewhere() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut dead = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            for cap in link.captures_iter(line) {
                let target = &cap[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                checked += 1;
                let place = format!(
                    "{}:{}",
                    file.strip_prefix(root()).unwrap_or(&file).display(),
                    i + 1
                );
                if !dest.exists() {
                    dead.push(format!("{place}: {target} (no such file)"));
                } else if !fragment.is_empty()
                    && dest.extension().is_some_and(|e| e == "md")
                    && !anchors(&dest).contains(fragment)
                {
                    dead.push(format!("{place}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(
        dead.is_empty(),
        "dead links in the docs:\n{}",
        dead.join("\n")
    );
    assert!(checked > 50, "the links were found ({checked})");
}

/// The README stays the first hour (what certgen is, prerequisites, a local try, an install
/// that works as written, check and monitor, where to go next); the reference lives in `docs/`.
#[test]
fn the_readme_stays_a_first_hour() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: move reference text to docs/ and link to it"
    );
    for must in [
        "cargo run --release -- --local ./certs",
        "tests/run-all",
        "## Prerequisites",
        "--create-namespace",
    ] {
        assert!(readme.contains(must), "README.md lost {must:?}");
    }
}

/// The exit codes in `docs/safety.md` are the binary's (`--help`, the man page): each row says
/// what the table of `src/exit.rs` says, and may add detail after it.
#[test]
fn the_docs_exit_codes_are_the_binarys() {
    let mut codes: Vec<(String, String)> = Vec::new();
    for line in certgen::exit::TABLE.lines().skip(1) {
        let line = line.trim();
        match line.split_once("  ") {
            Some((code, text)) if code.parse::<u8>().is_ok() => {
                codes.push((code.to_string(), text.trim().to_string()))
            }
            _ => {
                let last = codes.last_mut().unwrap();
                last.1 = format!("{} {line}", last.1);
            }
        }
    }
    assert_eq!(codes.len(), 6, "{codes:?}");
    let safety = std::fs::read_to_string(root().join("docs/safety.md")).unwrap();
    for (code, text) in codes {
        let row = safety
            .lines()
            .find_map(|l| l.strip_prefix(&format!("| {code} | ")))
            .unwrap_or_else(|| panic!("docs/safety.md has no row for exit code {code}"));
        let said = text.trim_end_matches(')');
        assert!(
            row.starts_with(said),
            "docs/safety.md, exit code {code}:\n  docs:   {row}\n  binary: {text}"
        );
    }
}
