//! The local store: Envoy Gateway's layout, one directory per Secret and one file per key
//! (`DIR/<secret>/{ca.crt,tls.crt,tls.key}`, `DIR/<hmac secret>/hmac-secret`).
//!
//! A Secret is written the way the kubelet writes a mounted Secret: every key goes into a fresh
//! hidden directory `..<timestamp>`, then the symlink `..data` is swapped to it in one rename, and
//! each `DIR/<secret>/<key>` is a symlink to `..data/<key>`. So a reader never sees half of a
//! Secret (a new `tls.crt` with an old `tls.key`), and a run killed mid-write leaves the previous
//! Secret intact. Directories written by other tools (plain files) are read as they are and moved
//! to this layout on certgen's first write. Key files are 0600, Secret directories 0700. Certgen's
//! annotations (rotation phase and times) live in `..data/.certgen-annotations.json`.
//!
//! Local mode trusts only what its user controls (often root, in a directory others can see):
//! every name under `DIR` is opened, created, renamed and removed through [`super::beneath`],
//! which never follows a link (only the `..data` and key links certgen makes are read, as text)
//! and refuses a directory or file another user owns or can write, and a key others can read.
//! After a write's switch every other version directory of the Secret is removed (those a killed
//! run left behind too, which may hold old private keys), as the kubelet's atomic writer does.
//!
//! What certgen judges is what consumers read: consumers open `DIR/<secret>/<key>`, certgen
//! reads `..data/<key>`. A read reports every visible name that is not the link into `..data`
//! ([`StoredSecret::divergent`]); any write of the Secret puts the links back.
//!
//! Durability, in rounds of fsyncs. Two promises hold across a power loss, not only a crash of
//! the process: (1) no torn Secret: a `..data` switch is made only after every file of the
//! version it points to, the version directory, and the version's name in the Secret's
//! directory are on disk; (2) order: a Secret's switch is on disk before any later write's
//! switch is made, so the CA Secret (written first, alone) is durable before anything it signs.
//! A write stages its version directory without syncing, yields (so the other writes of the
//! run, which the engine issues together, stage theirs too), then one round makes everything
//! written since the last round durable: an `fsync(2)` of each file and version directory
//! staged, of each Secret directory with a new entry (a version, a switch, a key's link), and of
//! `DIR` when a Secret directory was made ([`beneath::sync_all`]: all at once, so the round
//! costs about one device flush, not one per file). Only then are the switches made. Old
//! version directories are removed only after a later round, so a lost switch can never point
//! at a removed directory. [`SecretStore::flush`] makes the last switches durable. A run
//! writing the CA and then its leaves costs 3 rounds. Only certgen's own files are written out:
//! `syncfs(2)`, which this store used before, also waits for every other process's unwritten
//! data on the file system, so a run's time depended on its neighbours. The argument, what
//! survives a power cut at each point, and how the tests check it: `docs/durability.md`.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::beneath::{self, Exposed, Kind, Refusal};
use super::clock;
use super::{SecretStore, StoreError};
use crate::pki::hex;
use crate::secret::{
    Divergence, Expect, Found, Observed, SecretWrite, StoredSecret, TYPE_OPAQUE, TYPE_TLS,
    data_digest as digest,
};

/// The most a single file may hold; larger files are refused as not being certgen's.
const MAX_FILE: u64 = 1 << 20;

/// The symlink to the current version of a Secret's files.
const DATA: &str = "..data";

/// Where certgen's annotations are kept, inside the versioned directory.
const ANNOTATIONS: &str = ".certgen-annotations.json";

/// The Secret's type, recorded among those annotations by every write (a directory has no
/// type of its own; inferring it from the file names would read a config's Opaque Secret with
/// a `tls.crt` key as `kubernetes.io/tls`). A directory without it (another tool's, or an older
/// certgen's) is typed by its files: `kubernetes.io/tls` when it has `tls.crt` or `tls.key`.
const TYPE_RECORD: &str = "certgen.dev/secret-type";

/// The lock file in `DIR` ([`crate::lock`]), never a Secret.
pub const LOCK_FILE: &str = ".certgen.lock";

/// A Secret directory as read: its keys and certgen's annotations.
struct Contents {
    data: BTreeMap<String, Vec<u8>>,
    annotations: BTreeMap<String, String>,
    /// Visible names that are not the link into `..data` (certgen's layout only).
    divergent: Vec<Divergence>,
    /// The newest modification time of the data files read: another tool (Envoy Gateway's
    /// `certgen --local`) may write through the links into the current version, which leaves
    /// the `..data` link's own time alone.
    modified: Option<(i64, u32)>,
    /// The `..data` link's own modification time: certgen's last write of the Secret.
    switched: Option<(i64, u32)>,
}

/// The files of one Secret's directory as read: its data, certgen's records (the annotations
/// file of a version directory) and the newest data file's modification time.
#[derive(Default)]
struct Files {
    data: BTreeMap<String, Vec<u8>>,
    annotations: BTreeMap<String, String>,
    modified: Option<(i64, u32)>,
}

/// What a write leaves in a Secret's directory: its data and certgen's records, and the keys
/// that were there before it (those it drops are removed after the switch).
struct Merged {
    data: BTreeMap<String, Vec<u8>>,
    annotations: BTreeMap<String, String>,
    old_keys: Vec<String>,
}

/// Secrets as directories under one root.
pub struct LocalStore {
    root: PathBuf,
    /// `DIR`, opened and checked once, then every name is looked up from it.
    root_fd: OnceLock<OwnedFd>,
    sync: Mutex<SyncState>,
    /// `--force`: a `..data` link whose version directory is gone reads as an absent Secret,
    /// which the run then writes afresh.
    replace_dangling: bool,
    /// Data keys that hold private material besides `*.key` and names with `secret` in them:
    /// the config's (a layout's `key`, HMAC keys).
    secret_keys: Vec<String>,
    /// What a read does with a private key group or others may read: a run makes it 0600,
    /// `check` reports it.
    exposed_keys: Exposed,
    /// The private keys found readable by others: (Secret, path, mode it had).
    exposed: Mutex<Vec<(String, String, u32)>>,
}

/// What is on disk and what may still be only in the page cache: everything written since the
/// last round of fsyncs, to be synced in the next.
#[derive(Default)]
struct SyncState {
    /// Version directories staged so far in this process (each write takes the next number).
    staged: u64,
    /// Every version directory numbered up to this one is durable.
    synced: u64,
    /// Files and version directories written since the last round, each synced once.
    written: Vec<OwnedFd>,
    /// Secret directories with an entry made since the last round (a version directory, the
    /// `..data` switch, a key's link), by Secret.
    dirs: BTreeMap<String, Arc<OwnedFd>>,
    /// `DIR` has a Secret directory made since the last round.
    root: bool,
    /// Old version directories (the Secret's directory, its path, the version), removed once the
    /// switch away from them is durable.
    obsolete: Vec<(Arc<OwnedFd>, PathBuf, String)>,
    /// How many rounds of fsyncs this store made, and how many fsyncs in all (for tests).
    rounds: u64,
    fsyncs: u64,
}

impl SyncState {
    /// Whether something written is not yet known to be durable.
    fn dirty(&self) -> bool {
        !self.written.is_empty() || !self.dirs.is_empty() || self.root
    }
}

/// A store error for `path` from a refusal: the trust rule's own message, or `doing` and the
/// system's error.
fn refused(path: &Path, doing: &str, r: Refusal) -> StoreError {
    super::refusal(&path.display().to_string(), doing, r)
}

impl LocalStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            root_fd: OnceLock::new(),
            sync: Mutex::new(SyncState::default()),
            replace_dangling: false,
            secret_keys: Vec::new(),
            exposed_keys: Exposed::Tighten,
            exposed: Mutex::new(Vec::new()),
        }
    }

    /// For `certgen check`: a private key others may read is left as it is and listed by
    /// [`LocalStore::exposed_keys`] (a run makes it 0600).
    pub fn reporting_exposed_keys(mut self) -> Self {
        self.exposed_keys = Exposed::Report;
        self
    }

    /// With `--force`, a Secret whose `..data` link points to a missing version directory is
    /// read as absent, so the run writes it afresh (without, the read is refused with this
    /// hint).
    pub fn replacing_dangling(mut self, force: bool) -> Self {
        self.replace_dangling = force;
        self
    }

    /// Data keys that hold private material by the config's layouts (each TLS Secret's key,
    /// the CA's keys, HMAC keys), besides `*.key`: never readable by others.
    pub fn with_secret_keys(mut self, keys: impl IntoIterator<Item = String>) -> Self {
        self.secret_keys.extend(keys);
        self
    }

    fn is_secret(&self, key: &str) -> bool {
        self.secret_keys.iter().any(|s| s == key) || key.ends_with(".key") || key.contains("secret")
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.sync.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `DIR`, opened and checked ([`beneath::open_root`]) on first use and kept open: every
    /// later name is looked up from this descriptor, so `DIR` and the directories above it are
    /// checked once per run, and a `DIR` moved away meanwhile is not followed to another place.
    /// `None` when it does not exist and `create` is not set.
    fn open_root(&self, create: bool) -> Result<Option<BorrowedFd<'_>>, StoreError> {
        if let Some(fd) = self.root_fd.get() {
            return Ok(Some(fd.as_fd()));
        }
        let opened = beneath::open_root(&self.root, create)
            .map_err(|(path, r)| refused(Path::new(&path), "open the --local directory", r))?;
        Ok(opened.map(|fd| self.root_fd.get_or_init(|| fd).as_fd()))
    }

    /// One round: makes everything written since the last round durable (an fsync of each
    /// file, version directory and Secret directory written, and of `DIR` if a Secret directory
    /// was made, all at once: [`beneath::sync_all`]), then removes the version directories
    /// whose replacement is now durable.
    fn sync_round(&self, state: &mut SyncState) -> Result<(), StoreError> {
        let upto = state.staged;
        let root = if state.root {
            self.open_root(false)?
        } else {
            None
        };
        let written = std::mem::take(&mut state.written);
        let dirs = std::mem::take(&mut state.dirs);
        let fds: Vec<BorrowedFd<'_>> = written
            .iter()
            .map(AsFd::as_fd)
            .chain(dirs.values().map(|dir| dir.as_fd()))
            .chain(root)
            .collect();
        beneath::sync_all(&fds)
            .map_err(|e| Self::err(&self.root, format!("cannot sync to disk: {e}")))?;
        state.synced = upto;
        state.root = false;
        state.rounds += 1;
        state.fsyncs += fds.len() as u64;
        for (dir, path, version) in state.obsolete.drain(..) {
            if let Err(e) = beneath::remove_tree(dir.as_fd(), &version) {
                tracing::warn!(
                    "cannot remove the old version {}: {e}",
                    path.join(&version).display()
                );
            }
        }
        Ok(())
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn err(path: &Path, message: impl Into<String>) -> StoreError {
        StoreError::Local {
            path: path.display().to_string(),
            message: message.into(),
        }
    }

    /// Reads the file `name` of the Secret `secret` in the directory `dir` (at `path`): a
    /// regular file, trusted, at most [`MAX_FILE`] bytes; a private key others may read is
    /// made 0600 or reported ([`LocalStore::reporting_exposed_keys`]). With its modification
    /// time.
    fn read_file(
        &self,
        secret: &str,
        dir: BorrowedFd<'_>,
        path: &Path,
        name: &str,
    ) -> Result<(Vec<u8>, (i64, u32)), StoreError> {
        let policy = if self.is_secret(name) {
            self.exposed_keys
        } else {
            Exposed::Public
        };
        let shown = path.join(name);
        let read = beneath::read_file(dir, name, MAX_FILE, policy)
            .map_err(|r| refused(&shown, "read", r))?;
        if let Some(mode) = read.exposed {
            let shown = shown.display().to_string();
            if policy == Exposed::Tighten {
                tracing::warn!(
                    "{shown} had mode {mode:04o}, readable by others: made it 0600; it may have been read, consider rotating with --overwrite"
                );
            }
            // Once per file, however often a run reads it (a dry run may plan twice).
            let mut exposed = self.exposed.lock().unwrap_or_else(|e| e.into_inner());
            if !exposed.iter().any(|(_, path, _)| *path == shown) {
                exposed.push((secret.to_string(), shown, mode));
            }
        }
        Ok((read.bytes, read.modified))
    }

    /// Reads a Secret directory in one consistent version. A writer may switch `..data` and
    /// remove the old version while it is being read: then the read starts again on the new one.
    fn read(&self, name: &str) -> Result<Option<Contents>, StoreError> {
        let link = || -> Option<String> {
            let root = self.open_root(false).ok()??;
            let dir = beneath::open_dir(root, name).ok()??;
            beneath::read_link(dir.as_fd(), DATA).ok()?
        };
        let mut attempts = 0;
        loop {
            // The link the read followed; looked at again only when the read fails.
            let mut seen = None;
            match self.read_once(name, &mut seen) {
                Err(e) if attempts < 10 && seen.is_some() && link() != seen => {
                    attempts += 1;
                    tracing::debug!("{e}; the Secret changed while being read, reading it again");
                }
                other => return other,
            }
        }
    }

    /// What a write leaves in Secret `write.name` (at `path`), read as `current`: its data and
    /// certgen's records merged into what is there, and the keys there before. Refused when
    /// the Secret is not as the write expects (a conflict), or a key is not a file name.
    fn merged(
        write: &SecretWrite,
        current: Option<Contents>,
        path: &Path,
    ) -> Result<Merged, StoreError> {
        match (&write.expect, &current) {
            (Expect::Absent, None) => {}
            (Expect::Version(v), Some(c)) if *v == digest(&c.data) => {}
            (Expect::Absent, Some(_)) => {
                return Err(StoreError::Conflict {
                    what: path.display().to_string(),
                    detail: "it was created by someone else after certgen found it missing".into(),
                });
            }
            (Expect::Version(_), _) => {
                return Err(StoreError::Conflict {
                    what: path.display().to_string(),
                    detail: "its files changed after certgen read them".into(),
                });
            }
        }
        let (mut data, mut annotations) = match current {
            Some(c) => (c.data, c.annotations),
            None => (BTreeMap::new(), BTreeMap::new()),
        };
        let old_keys: Vec<String> = data.keys().cloned().collect();
        data.extend(write.data.iter().map(|(k, v)| (k.clone(), v.clone())));
        for key in &write.remove {
            data.remove(key);
        }
        annotations.extend(write.annotations.clone());
        // When it is written on the machine's monotonic clock (see `clock.rs`).
        if let Some(stamp) = clock::stamp() {
            annotations.insert(clock::WRITTEN_BOOT.to_string(), stamp);
        }
        annotations.insert(TYPE_RECORD.into(), write.type_.into());
        if let Some(key) = data
            .keys()
            .find(|k| k.contains('/') || k.starts_with('.') || k.is_empty())
        {
            return Err(Self::err(
                path,
                format!("cannot write key {key:?}: not a file name"),
            ));
        }
        Ok(Merged {
            data,
            annotations,
            old_keys,
        })
    }

    /// Every key of a new version (and certgen's records) in a fresh hidden directory
    /// `version` (at `vpath`) in the Secret's directory `dir`, not yet synced: the files and
    /// the directory, open for the next sync round. Secret keys get mode 0600, others 0644.
    fn stage(
        dir: BorrowedFd<'_>,
        (version, vpath): (&str, &Path),
        (data, annotations): (&BTreeMap<String, Vec<u8>>, &BTreeMap<String, String>),
        secret_key: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<OwnedFd>, StoreError> {
        let vdir = beneath::make_dir(dir, version, 0o700)
            .map_err(|r| refused(vpath, "create directory", r))?;
        let mut written = Vec::with_capacity(data.len() + 2);
        for (key, value) in data {
            let mode = if secret_key(key) { 0o600 } else { 0o644 };
            written.push(
                beneath::create_file(vdir.fd.as_fd(), key, value, mode)
                    .map_err(|e| Self::err(&vpath.join(key), format!("cannot write: {e}")))?,
            );
        }
        let json = serde_json::to_vec_pretty(annotations).expect("annotations serialize");
        written.push(
            beneath::create_file(vdir.fd.as_fd(), ANNOTATIONS, &json, 0o600)
                .map_err(|e| Self::err(&vpath.join(ANNOTATIONS), format!("cannot write: {e}")))?,
        );
        written.push(vdir.fd);
        Ok(written)
    }

    /// After a switch to `version` in the Secret's directory `dir` (at `path`): every other
    /// version directory (the one replaced, and any a killed or failed run left behind,
    /// perhaps holding old private keys) goes once this switch is durable, as the kubelet's
    /// atomic writer does; temporary links of a killed run go now.
    fn tidy(&self, dir: &Arc<OwnedFd>, path: &Path, version: &str) -> Result<(), StoreError> {
        let dir_fd = dir.as_fd();
        let entries =
            beneath::list(dir_fd).map_err(|e| Self::err(path, format!("cannot list: {e}")))?;
        let mut state = self.state();
        for (name, _) in entries {
            if name == DATA || name == version {
                continue;
            }
            if name.starts_with("..") {
                state.obsolete.push((dir.clone(), path.to_path_buf(), name));
            } else if name.starts_with('.') && name.contains(".certgen-") {
                let _ = beneath::remove_file(dir_fd, &name);
            }
        }
        Ok(())
    }

    /// Where `dir`'s `..data` link (at `data_path`) points: a version directory beside it, or
    /// `None` when there is no link (a Secret of plain files). Anything else is refused.
    fn data_link(dir: BorrowedFd<'_>, data_path: &Path) -> Result<Option<String>, StoreError> {
        match beneath::read_link(dir, DATA) {
            Ok(Some(target)) => {
                if !target.starts_with("..")
                    || target.contains('/')
                    || target == DATA
                    || target == ".."
                {
                    return Err(Self::err(
                        data_path,
                        format!(
                            "points to {target:?}, not to a version directory beside it; delete {DATA} to reset"
                        ),
                    ));
                }
                Ok(Some(target))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(Self::err(
                data_path,
                format!("is not a symbolic link certgen can read ({e}); move it away"),
            )),
        }
    }

    /// The files of Secret `name`'s current version directory `version` (in `dir`, at
    /// `path`; `..data` at `data_path`): its data and certgen's records. `None` when the
    /// version is missing and `--force` writes the Secret afresh; refused when it is missing
    /// otherwise, or holds anything but regular files.
    fn read_version(
        &self,
        name: &str,
        dir: BorrowedFd<'_>,
        (path, data_path): (&Path, &Path),
        version: &str,
    ) -> Result<Option<Files>, StoreError> {
        let vpath = path.join(version);
        let vdir = match beneath::open_dir(dir, version) {
            Ok(Some(vdir)) => vdir,
            Ok(None) if self.replace_dangling => {
                tracing::warn!(
                    "{} points to {version}, which is missing; the Secret is written afresh because of --force",
                    data_path.display()
                );
                return Ok(None);
            }
            Ok(None) => {
                return Err(Self::err(
                    data_path,
                    format!(
                        "points to {version}, which does not exist (a run was interrupted, or the directory was changed by hand); nothing was written: run certgen with --force to write this Secret afresh, or delete {DATA} to have its plain files read"
                    ),
                ));
            }
            Err(r) => return Err(refused(&vpath, "read", r)),
        };
        let vdir = vdir.as_fd();
        let entries =
            beneath::list(vdir).map_err(|e| Self::err(&vpath, format!("cannot list: {e}")))?;
        let mut files = Files::default();
        for (key, kind) in entries {
            if key == ANNOTATIONS {
                let json = beneath::read_file(vdir, &key, MAX_FILE, Exposed::Public)
                    .map_err(|r| refused(&vpath.join(&key), "read", r))?
                    .bytes;
                files.annotations = serde_json::from_slice(&json).map_err(|e| {
                    Self::err(
                        &vpath.join(&key),
                        format!("is not valid JSON ({e}); delete it to reset certgen's records"),
                    )
                })?;
            } else if key.starts_with('.') {
                continue;
            } else if kind == Kind::File {
                let (bytes, t) = self.read_file(name, vdir, &vpath, &key)?;
                files.modified = files.modified.max(Some(t));
                files.data.insert(key, bytes);
            } else {
                // certgen writes only regular files here.
                return Err(refused(
                    &vpath.join(&key),
                    "read",
                    beneath::read_file(vdir, &key, MAX_FILE, Exposed::Public)
                        .err()
                        .unwrap_or(Refusal::Untrusted("is not a regular file".into())),
                ));
            }
        }
        Ok(Some(files))
    }

    /// The plain files of Secret `name` (no `..data` link) in `dir`, at `path`: every regular
    /// file but hidden ones; a symbolic link is refused.
    fn read_plain(
        &self,
        name: &str,
        dir: BorrowedFd<'_>,
        path: &Path,
    ) -> Result<Files, StoreError> {
        let entries =
            beneath::list(dir).map_err(|e| Self::err(path, format!("cannot list: {e}")))?;
        let mut files = Files::default();
        for (key, kind) in entries {
            if key.starts_with('.') {
                continue; // temp files, editors' swap files
            }
            match kind {
                Kind::Link => {
                    return Err(Self::err(
                        &path.join(&key),
                        "is a symbolic link; certgen does not follow links: replace it with a regular file",
                    ));
                }
                Kind::File => {
                    let (bytes, t) = self.read_file(name, dir, path, &key)?;
                    files.modified = files.modified.max(Some(t));
                    files.data.insert(key, bytes);
                }
                Kind::Dir | Kind::Other => {}
            }
        }
        Ok(files)
    }

    /// One read, `..data` resolved once (its target put in `seen`).
    fn read_once(
        &self,
        name: &str,
        seen: &mut Option<String>,
    ) -> Result<Option<Contents>, StoreError> {
        let Some(root) = self.open_root(false)? else {
            return Ok(None);
        };
        let path = self.dir(name);
        let dir = match beneath::open_dir(root, name) {
            Ok(Some(dir)) => dir,
            Ok(None) => return Ok(None),
            Err(r) => return Err(refused(&path, "read", r)),
        };
        let dir = dir.as_fd();
        let data_path = path.join(DATA);
        let current = Self::data_link(dir, &data_path)?;
        seen.clone_from(&current);
        let mut switched = None;
        let files = if let Some(version) = &current {
            switched = beneath::mtime(dir, DATA).ok();
            match self.read_version(name, dir, (&path, &data_path), version)? {
                Some(files) => files,
                None => return Ok(None),
            }
        } else {
            self.read_plain(name, dir, &path)?
        };
        let Files {
            data,
            annotations,
            modified,
        } = files;
        if data.is_empty() {
            return Ok(None);
        }
        let divergent = if current.is_some() {
            data.iter()
                .filter_map(|(key, value)| self.visible(name, dir, &path, key, value).transpose())
                .collect::<Result<_, _>>()?
        } else {
            Vec::new() // plain files: what certgen reads is what consumers read
        };
        Ok(Some(Contents {
            data,
            annotations,
            divergent,
            modified,
            switched,
        }))
    }

    /// What consumers find at `dir/key` (`path` is the directory's), when it is not the link
    /// into `..data` holding `value`.
    fn visible(
        &self,
        secret: &str,
        dir: BorrowedFd<'_>,
        path: &Path,
        key: &str,
        value: &[u8],
    ) -> Result<Option<Divergence>, StoreError> {
        let shown = path.join(key);
        let found = match beneath::link_or_kind(dir, key) {
            Err(e) => return Err(Self::err(&shown, format!("cannot read: {e}"))),
            Ok(Err(None)) => Found::Missing,
            Ok(Ok(target)) => {
                if target == format!("{DATA}/{key}") {
                    return Ok(None);
                }
                Found::Foreign
            }
            Ok(Err(Some(Kind::File))) => {
                let (seen, _) = self.read_file(secret, dir, path, key)?;
                if seen == value {
                    Found::Copy
                } else if value.starts_with(&seen) {
                    Found::Truncated
                } else {
                    Found::Foreign
                }
            }
            Ok(Err(Some(_))) => Found::Foreign,
        };
        Ok(Some(Divergence {
            key: key.to_string(),
            path: shown.display().to_string(),
            found,
        }))
    }
}

impl SecretStore for LocalStore {
    fn describe(&self) -> String {
        format!("directory {}", self.root.display())
    }

    fn object(&self, name: &str) -> String {
        self.dir(name).display().to_string()
    }

    async fn get(&self, name: &str) -> Result<Observed, StoreError> {
        let Some(contents) = self.read(name)? else {
            return Ok(Observed::Absent);
        };
        let data = contents.data;
        let modified = contents.modified;
        let switched = contents.switched;
        let mut annotations = contents.annotations;
        let type_ = match annotations.remove(TYPE_RECORD) {
            Some(recorded) => recorded,
            None if data.contains_key("tls.crt") || data.contains_key("tls.key") => TYPE_TLS.into(),
            None => TYPE_OPAQUE.into(),
        };
        // The `..data` link is made afresh by every write of certgen's: its own time is the
        // write's. Another tool's write through the links (or of plain files) shows in the
        // files' own times: the newest of them all is the last write.
        let written_at = switched
            .into_iter()
            .chain(modified)
            .max()
            .and_then(|(secs, nanos)| {
                time::OffsetDateTime::from_unix_timestamp(secs)
                    .ok()
                    .map(|t| t + time::Duration::nanoseconds(nanos.into()))
            })
            .map(|at| {
                let stamp = annotations.get(clock::WRITTEN_BOOT);
                clock::no_older_than(at, stamp, || self.now())
            });
        Ok(Observed::Present(StoredSecret {
            name: name.to_string(),
            type_,
            version: digest(&data),
            written_at,
            data,
            labels: BTreeMap::new(),
            annotations,
            owners: Vec::new(),
            divergent: contents.divergent,
            certificate: None,
            writes: Vec::new(),
        }))
    }

    /// The private keys found readable by group or others, as (Secret, path, problem): made
    /// 0600 by a run, left for `certgen check` to report.
    fn exposed_keys(&self) -> Vec<(String, String, String)> {
        let tightened = self.exposed_keys == Exposed::Tighten;
        let mut seen = self
            .exposed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        seen.dedup();
        seen.into_iter()
            .map(|(secret, path, mode)| {
                let problem = if tightened {
                    format!("{path} had mode {mode:04o}, readable by others; made 0600. It may have been read: consider rotating with --overwrite")
                } else {
                    format!("{path} has mode {mode:04o}: a private key others can read; run certgen (or `chmod 600` it) to make it 0600, and consider rotating with --overwrite: it may have been read")
                };
                (secret, path, problem)
            })
            .collect()
    }

    async fn put(&self, write: &SecretWrite) -> Result<(), StoreError> {
        let path = self.dir(&write.name);
        if write.name.contains('/') || write.name.starts_with('.') || write.name.is_empty() {
            return Err(Self::err(&path, "is not a Secret name certgen can write"));
        }
        let current = self.read(&write.name)?;
        let Merged {
            data,
            annotations,
            old_keys,
        } = Self::merged(write, current, &path)?;
        let secret_key = |k: &str| write.secret_keys.iter().any(|s| s == k) || self.is_secret(k);

        let root = self
            .open_root(true)?
            .ok_or_else(|| Self::err(&self.root, "cannot create the directory"))?;
        let made = beneath::make_dir(root, &write.name, 0o700)
            .map_err(|r| refused(&path, "create directory", r))?;
        let dir = Arc::new(made.fd);
        let dir_fd = dir.as_fd();
        // 1. Every key of the new version in a fresh hidden directory, not yet synced.
        let version = format!("..{}", hex(&crate::pki::random_bytes(8)));
        let vpath = path.join(&version);
        let staged = Self::stage(
            dir_fd,
            (&version, &vpath),
            (&data, &annotations),
            &secret_key,
        );
        let written = match staged {
            Ok(written) => written,
            Err(e) => {
                // Nothing points to it: nothing was written that anyone reads.
                let _ = beneath::remove_tree(dir_fd, &version);
                return Err(e);
            }
        };
        // Its files, the version directory, the version's name in the Secret's directory, and
        // the Secret directory's name in DIR if it is new: all for the next round.
        let ticket = {
            let mut state = self.state();
            state.staged += 1;
            state.written.extend(written);
            state.dirs.insert(write.name.clone(), dir.clone());
            state.root |= made.created;
            state.staged
        };
        // 2. Let the run's other writes stage theirs, so one round covers them all.
        tokio::task::yield_now().await;
        // 3. This version, and every switch made before, durable before this switch is made.
        let synced = {
            let mut state = self.state();
            if state.synced < ticket {
                self.sync_round(&mut state)
            } else {
                Ok(())
            }
        };
        // 4. One rename switches every key at once.
        if let Err(e) = synced.and_then(|()| swap_symlink(dir_fd, &path, DATA, &version)) {
            let _ = beneath::remove_tree(dir_fd, &version);
            return Err(e);
        }
        // From here on consumers may read the new version: a failure is a partial write.
        let partial = |e: StoreError| match e {
            StoreError::Local { path, message } => StoreError::Partial { path, message },
            other => other,
        };
        // The switch (and the links below) durable in the next round.
        self.state().dirs.insert(write.name.clone(), dir.clone());
        // 5. Each key is a link into ..data (replacing plain files of other tools, and whatever
        // stood in for a link, atomically).
        for key in data.keys() {
            swap_symlink(dir_fd, &path, key, &format!("{DATA}/{key}")).map_err(partial)?;
        }
        for key in old_keys.iter().filter(|k| !data.contains_key(*k)) {
            beneath::remove_file(dir_fd, key)
                .map_err(|e| partial(Self::err(&path.join(key), format!("cannot remove: {e}"))))?;
        }
        // 6. The versions this switch replaces go once it is durable.
        self.tidy(&dir, &path, &version).map_err(partial)
    }

    /// The file system's clock, the one write times are on (`clock.rs`).
    fn now(&self) -> time::OffsetDateTime {
        clock::now(&self.root)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let mut state = self.state();
        if state.dirty() || !state.obsolete.is_empty() {
            self.sync_round(&mut state)?;
        }
        Ok(())
    }
}

impl Drop for LocalStore {
    /// A caller that never flushed still gets its last switches synced and old versions removed
    /// (errors cannot be reported here; `flush` reports them).
    fn drop(&mut self) {
        let mut state = self.state();
        if state.dirty() || !state.obsolete.is_empty() {
            let _ = self.sync_round(&mut state);
        }
    }
}

/// Points `name` in `dir` (at `path`) at `target` atomically: a new link when nothing is there
/// yet (a new Secret, a missing name), else a temporary link renamed over what is there.
fn swap_symlink(
    dir: BorrowedFd<'_>,
    path: &Path,
    name: &str,
    target: &str,
) -> Result<(), StoreError> {
    let shown = path.join(name);
    match beneath::symlink(dir, name, target) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(LocalStore::err(&shown, format!("cannot write: {e}"))),
    }
    let tmp = format!(".{name}.certgen-{}", hex(&crate::pki::random_bytes(6)));
    let result =
        beneath::symlink(dir, &tmp, target).and_then(|()| beneath::rename(dir, &tmp, name));
    result.map_err(|e| {
        let _ = beneath::remove_file(dir, &tmp);
        LocalStore::err(&shown, format!("cannot write: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn write(name: &str, expect: Expect, value: &str) -> SecretWrite {
        SecretWrite {
            name: name.into(),
            type_: TYPE_TLS,
            data: BTreeMap::from([
                ("tls.crt".to_string(), value.as_bytes().to_vec()),
                ("tls.key".to_string(), b"key".to_vec()),
            ]),
            secret_keys: vec!["tls.key".into()],
            remove: vec![],
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            expect,
        }
    }

    fn get(store: &LocalStore, name: &str) -> StoredSecret {
        match block_on(store.get(name)).unwrap() {
            Observed::Present(s) => s,
            Observed::Absent => panic!("{name} absent"),
        }
    }

    #[test]
    fn a_run_of_writes_costs_three_rounds_of_fsyncs_and_leaves_one_version_each() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStore::new(tmp.path());
        let leaves = ["a", "b", "c", "d"];
        block_on(async {
            // As the engine does: the CA alone, then the leaves together, then flush.
            store.put(&write("ca", Expect::Absent, "ca")).await.unwrap();
            let puts = leaves.map(|n| write(n, Expect::Absent, n));
            futures::future::try_join_all(puts.iter().map(|w| store.put(w)))
                .await
                .unwrap();
            store.flush().await.unwrap();
        });
        // Each write: 3 files (tls.crt, tls.key, the annotations), its version directory, its
        // Secret directory. Round 1: the CA's 5 and DIR (a new Secret directory); round 2: the
        // CA's switch (its directory), the leaves' 4 x 5, and DIR; round 3: the leaves'
        // switches. Each file and directory once per round, whatever it had written.
        let counts = |store: &LocalStore| {
            let state = store.state();
            (state.rounds, state.fsyncs)
        };
        assert_eq!(counts(&store), (3, 6 + 22 + 4));
        // A rewrite of one Secret: one round before its switch, one at flush; the old version
        // directory goes once the switch is durable.
        let v = get(&store, "a").version;
        block_on(async {
            store
                .put(&write("a", Expect::Version(v), "a2"))
                .await
                .unwrap();
            store.flush().await.unwrap();
        });
        assert_eq!(counts(&store), (5, 32 + 5 + 1));
        let versions = fs::read_dir(tmp.path().join("a"))
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.starts_with("..") && n != DATA
            })
            .count();
        assert_eq!(versions, 1);
        assert_eq!(fs::read(tmp.path().join("a/tls.crt")).unwrap(), b"a2");
        // Nothing pending: flush does not sync again.
        block_on(store.flush()).unwrap();
        assert_eq!(store.state().rounds, 5);
    }

    #[test]
    fn visible_names_that_are_not_the_links_into_data_are_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStore::new(tmp.path());
        block_on(store.put(&write("s", Expect::Absent, "certificate"))).unwrap();
        assert_eq!(get(&store, "s").divergent, vec![]);
        let crt = tmp.path().join("s/tls.crt");
        let key = tmp.path().join("s/tls.key");
        let found = |store: &LocalStore| -> Vec<(String, Found)> {
            get(store, "s")
                .divergent
                .into_iter()
                .map(|d| (d.key, d.found))
                .collect()
        };
        let cases: [(&str, &dyn Fn(), Found); 6] = [
            (
                "missing",
                &|| fs::remove_file(&crt).unwrap(),
                Found::Missing,
            ),
            (
                "copy",
                &|| {
                    fs::remove_file(&crt).unwrap();
                    fs::write(&crt, "certificate").unwrap();
                },
                Found::Copy,
            ),
            (
                "truncated",
                &|| {
                    fs::remove_file(&crt).unwrap();
                    fs::write(&crt, "certif").unwrap();
                },
                Found::Truncated,
            ),
            (
                "empty",
                &|| {
                    fs::remove_file(&crt).unwrap();
                    fs::write(&crt, "").unwrap();
                },
                Found::Truncated,
            ),
            (
                "other content",
                &|| {
                    fs::remove_file(&crt).unwrap();
                    fs::write(&crt, "someone else's").unwrap();
                },
                Found::Foreign,
            ),
            (
                "link elsewhere",
                &|| {
                    fs::remove_file(&crt).unwrap();
                    std::os::unix::fs::symlink("..data/tls.key", &crt).unwrap();
                },
                Found::Foreign,
            ),
        ];
        for (what, break_it, expected) in cases {
            break_it();
            assert_eq!(
                found(&store),
                vec![("tls.crt".to_string(), expected)],
                "{what}"
            );
            assert_eq!(
                get(&store, "s").data["tls.crt"],
                b"certificate",
                "{what}: certgen's copy is read, not the visible file"
            );
            // A write with no data puts the link back.
            let v = get(&store, "s").version;
            let relink = SecretWrite {
                data: BTreeMap::new(),
                ..write("s", Expect::Version(v), "")
            };
            block_on(store.put(&relink)).unwrap();
            assert_eq!(found(&store), vec![], "{what}: repaired");
            assert_eq!(fs::read(&crt).unwrap(), b"certificate");
        }
        fs::remove_file(&key).unwrap();
        fs::create_dir(&key).unwrap();
        assert_eq!(found(&store), vec![("tls.key".to_string(), Found::Foreign)]);
    }

    fn conflict(result: Result<(), StoreError>) -> String {
        match result {
            Err(StoreError::Conflict { detail, .. }) => detail,
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn writes_are_fenced_by_absence_or_by_the_version_read() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStore::new(tmp.path());
        assert_eq!(block_on(store.get("s")).unwrap(), Observed::Absent);
        let missing = block_on(store.put(&write("s", Expect::Version("x".into()), "a")));
        assert_eq!(
            conflict(missing),
            "its files changed after certgen read them"
        );
        block_on(store.put(&write("s", Expect::Absent, "a"))).unwrap();
        let again = block_on(store.put(&write("s", Expect::Absent, "b")));
        assert_eq!(
            conflict(again),
            "it was created by someone else after certgen found it missing"
        );
        let read = get(&store, "s");
        block_on(store.put(&write("s", Expect::Version(read.version.clone()), "b"))).unwrap();
        // The version read before that write is stale now.
        let stale = block_on(store.put(&write("s", Expect::Version(read.version), "c")));
        assert_eq!(conflict(stale), "its files changed after certgen read them");
        assert_eq!(get(&store, "s").data["tls.crt"], b"b");
    }

    #[test]
    fn private_keys_are_0600_and_a_secret_directory_0700() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStore::new(tmp.path());
        let mut w = write("s", Expect::Absent, "crt");
        w.data.insert("ca.crt".into(), b"bundle".to_vec());
        w.data.insert("hmac-secret".into(), b"bytes".to_vec());
        w.secret_keys.push("hmac-secret".into());
        block_on(store.put(&w)).unwrap();
        let mode = |p: &str| {
            fs::metadata(tmp.path().join("s").join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("tls.key"), 0o600);
        assert_eq!(mode("hmac-secret"), 0o600);
        assert_eq!(mode("tls.crt"), 0o644);
        assert_eq!(mode("ca.crt"), 0o644);
        assert_eq!(mode(""), 0o700);
    }

    #[test]
    fn keys_are_removed_annotations_kept_and_the_type_follows_the_keys() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStore::new(tmp.path());
        let mut w = write("ca", Expect::Absent, "crt");
        w.data.insert("next.crt".into(), b"next".to_vec());
        w.annotations.insert("a".into(), "1".into());
        block_on(store.put(&w)).unwrap();
        let read = get(&store, "ca");
        assert_eq!(read.type_, TYPE_TLS);
        assert_eq!(read.annotations["a"], "1");
        let mut w = write("ca", Expect::Version(read.version), "crt");
        w.data.clear();
        w.remove = vec!["next.crt".into()];
        w.annotations.insert("b".into(), "2".into());
        block_on(store.put(&w)).unwrap();
        let read = get(&store, "ca");
        let keys: Vec<&str> = read.data.keys().map(String::as_str).collect();
        assert_eq!(keys, ["tls.crt", "tls.key"]);
        assert!(!tmp.path().join("ca/next.crt").exists());
        // (Besides the two, the stamp of the machine's monotonic clock: `clock.rs`.)
        assert_eq!(read.annotations.len(), 3, "{:?}", read.annotations);
        assert!(read.annotations.contains_key(clock::WRITTEN_BOOT));
        assert_eq!(read.divergent, vec![]);

        let hmac = SecretWrite {
            type_: TYPE_OPAQUE,
            data: BTreeMap::from([("hmac-secret".to_string(), vec![1; 32])]),
            ..write("hmac", Expect::Absent, "")
        };
        block_on(store.put(&hmac)).unwrap();
        assert_eq!(get(&store, "hmac").type_, TYPE_OPAQUE);

        // The type written is the type read, whatever the keys' names (a config's Opaque
        // Secret with tls.crt and tls.key), and the record is no annotation of the Secret's.
        let opaque = SecretWrite {
            type_: TYPE_OPAQUE,
            ..write("opaque-tls", Expect::Absent, "crt")
        };
        block_on(store.put(&opaque)).unwrap();
        let read = get(&store, "opaque-tls");
        assert_eq!(read.type_, TYPE_OPAQUE);
        assert!(
            !read.annotations.contains_key(TYPE_RECORD),
            "{:?}",
            read.annotations
        );
    }

    #[test]
    fn another_tools_plain_files_are_read_as_they_are_and_moved_to_links_on_write() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("envoy");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("tls.crt"), "theirs").unwrap();
        fs::write(dir.join("tls.key"), "key").unwrap();
        fs::write(dir.join(".swap"), "ignored").unwrap();
        // Envoy Gateway writes keys 0644: `check` reports that, and changes nothing...
        let mode = || {
            fs::metadata(dir.join("tls.key"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        let check = LocalStore::new(tmp.path()).reporting_exposed_keys();
        get(&check, "envoy");
        let exposed = check.exposed_keys();
        assert_eq!(exposed.len(), 1, "{exposed:?}");
        assert!(
            exposed[0].2.contains("tls.key has mode 0644"),
            "{exposed:?}"
        );
        assert_eq!(mode(), 0o644);
        // ... a run makes it 0600 (the file is this user's).
        let store = LocalStore::new(tmp.path());
        get(&store, "envoy");
        assert_eq!(mode(), 0o600);
        assert!(store.exposed_keys()[0].2.contains("made 0600"));
        let store = LocalStore::new(tmp.path());
        let read = get(&store, "envoy");
        assert_eq!(read.data.len(), 2);
        assert_eq!(read.data["tls.crt"], b"theirs");
        assert_eq!(
            read.divergent,
            vec![],
            "plain files are what consumers read"
        );
        block_on(store.put(&write("envoy", Expect::Version(read.version), "ours"))).unwrap();
        assert!(
            fs::symlink_metadata(dir.join("tls.crt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(dir.join("tls.crt")).unwrap(), b"ours");
        assert_eq!(get(&store, "envoy").divergent, vec![]);
    }

    #[test]
    fn links_and_oversized_files_are_refused_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalStore::new(tmp.path());
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), tmp.path().join("linked")).unwrap();
        let err = block_on(store.get("linked")).unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");

        let plain = tmp.path().join("plain");
        fs::create_dir(&plain).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", plain.join("tls.crt")).unwrap();
        let err = block_on(store.get("plain")).unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");

        let big = tmp.path().join("big");
        fs::create_dir(&big).unwrap();
        fs::write(big.join("tls.crt"), vec![b'x'; (MAX_FILE + 1) as usize]).unwrap();
        let err = block_on(store.get("big")).unwrap_err().to_string();
        assert!(err.contains("larger than 1 MiB"), "{err}");

        fs::write(tmp.path().join("file"), "x").unwrap();
        let err = block_on(store.get("file")).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
        assert_eq!(
            store.object("envoy"),
            tmp.path().join("envoy").display().to_string()
        );
        assert_eq!(
            store.describe(),
            format!("directory {}", tmp.path().display())
        );
    }
}
