//! The local store: Envoy Gateway's layout, one directory per Secret and one file per key
//! (`DIR/<secret>/{ca.crt,tls.crt,tls.key}`, `DIR/<hmac secret>/hmac-secret`).
//!
//! A Secret is written the way the kubelet writes a mounted Secret: every key goes into a fresh
//! hidden directory `..<timestamp>`, then the symlink `..data` is swapped to it in one rename, and
//! each `DIR/<secret>/<key>` is a symlink to `..data/<key>`. So a reader never sees half of a
//! Secret (a new `tls.crt` with an old `tls.key`), and a run killed mid-write leaves the previous
//! Secret intact. Directories written by other tools (plain files) are read as they are and moved
//! to this layout on certgen's first write. Key files are 0600, Secret directories 0700. Any
//! other symbolic link is refused rather than followed. Certgen's annotations (rotation phase and
//! times) live in `..data/.certgen-annotations.json`.
//!
//! What certgen judges is what consumers read: consumers open `DIR/<secret>/<key>`, certgen
//! reads `..data/<key>`. A read reports every visible name that is not the link into `..data`
//! ([`StoredSecret::divergent`]); any write of the Secret puts the links back.
//!
//! Durability, with few syncs. Two promises hold across a power loss, not only a crash of the
//! process: (1) no torn Secret: a `..data` switch is made only after every file of the version
//! it points to is on disk; (2) order: a Secret's switch is on disk before any later write's
//! switch is made, so the CA Secret (written first, alone) is durable before anything it signs.
//! Syncing each file, each version directory and each Secret directory costs ~6 `fsync`s per
//! Secret. Instead a write stages its version directory without syncing, yields (so the other
//! writes of the run, which the engine issues together, stage theirs too), then one
//! `syncfs(2)` makes all staged files and all earlier switches durable at once; only then are
//! the switches made. Old version directories are removed only after a later sync, so a lost
//! switch can never point at a removed directory. [`SecretStore::flush`] syncs the last
//! switches. A run writing the CA and then its leaves costs 3 syncs in all.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// A Secret directory as read: its keys and certgen's annotations.
struct Contents {
    data: BTreeMap<String, Vec<u8>>,
    annotations: BTreeMap<String, String>,
    /// The versioned directory `..data` points to, if this is certgen's layout.
    current: Option<String>,
    /// Visible names that are not the link into `..data` (certgen's layout only).
    divergent: Vec<Divergence>,
    /// The newest modification time of the data files read: another tool (Envoy Gateway's
    /// `certgen --local`) may write through the links into the current version, which leaves
    /// the `..data` link's own time alone.
    modified: Option<std::time::SystemTime>,
}

/// Secrets as directories under one root.
pub struct LocalStore {
    root: PathBuf,
    sync: Mutex<SyncState>,
}

/// What is on disk and what may still be only in the page cache.
#[derive(Default)]
struct SyncState {
    /// Version directories staged so far in this process (each write takes the next number).
    staged: u64,
    /// Every version directory numbered up to this one is durable.
    synced: u64,
    /// A `..data` switch was made after the last sync.
    switched: bool,
    /// Old version directories, removed once the switch away from them is durable.
    obsolete: Vec<PathBuf>,
    /// How many syncs this store made (for tests).
    syncs: u64,
}

impl LocalStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            sync: Mutex::new(SyncState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SyncState> {
        self.sync.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes everything written under the root so far durable (one `syncfs`), then removes the
    /// version directories whose replacement is now durable.
    fn sync_all(&self, state: &mut SyncState) -> Result<(), StoreError> {
        let root = fs::File::open(&self.root)
            .map_err(|e| Self::err(&self.root, format!("cannot open to sync: {e}")))?;
        let upto = state.staged;
        rustix::fs::syncfs(&root)
            .map_err(|e| Self::err(&self.root, format!("cannot sync to disk: {e}")))?;
        state.synced = upto;
        state.switched = false;
        state.syncs += 1;
        for old in state.obsolete.drain(..) {
            let _ = fs::remove_dir_all(old);
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

    fn read_file(path: &Path) -> Result<Vec<u8>, StoreError> {
        let meta =
            fs::symlink_metadata(path).map_err(|e| Self::err(path, format!("cannot read: {e}")))?;
        if meta.len() > MAX_FILE {
            return Err(Self::err(
                path,
                "is larger than 1 MiB; it cannot be a certificate or key certgen wrote",
            ));
        }
        fs::read(path).map_err(|e| Self::err(path, format!("cannot read: {e}")))
    }

    /// Reads a Secret directory in one consistent version. A writer may switch `..data` and
    /// remove the old version while it is being read: then the read starts again on the new one.
    fn read(&self, name: &str) -> Result<Option<Contents>, StoreError> {
        let link = self.dir(name).join(DATA);
        let mut attempts = 0;
        loop {
            let before = fs::read_link(&link).ok();
            match self.read_once(name) {
                Err(e) if attempts < 10 && fs::read_link(&link).ok() != before => {
                    attempts += 1;
                    tracing::debug!("{e}; the Secret changed while being read, reading it again");
                }
                other => return other,
            }
        }
    }

    /// One read, `..data` resolved once.
    fn read_once(&self, name: &str) -> Result<Option<Contents>, StoreError> {
        let dir = self.dir(name);
        let meta = match fs::symlink_metadata(&dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::err(&dir, format!("cannot read: {e}"))),
        };
        if meta.file_type().is_symlink() {
            return Err(Self::err(
                &dir,
                "is a symbolic link; certgen does not follow links: point --local at the real directory",
            ));
        }
        if !meta.is_dir() {
            return Err(Self::err(
                &dir,
                "exists but is not a directory; move it away or choose another --local directory",
            ));
        }
        let current = match fs::read_link(dir.join(DATA)) {
            Ok(target) => {
                let target = target.to_string_lossy().into_owned();
                if !target.starts_with("..") || target.contains('/') || target == DATA {
                    return Err(Self::err(
                        &dir.join(DATA),
                        format!(
                            "points to {target:?}, not to a version directory beside it; delete {DATA} to reset"
                        ),
                    ));
                }
                Some(target)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(Self::err(
                    &dir.join(DATA),
                    format!("is not a symbolic link certgen can read: {e}"),
                ));
            }
        };
        let mut data = BTreeMap::new();
        let mut annotations = BTreeMap::new();
        let mut modified: Option<std::time::SystemTime> = None;
        let mut saw = |path: &Path| {
            if let Ok(t) = fs::metadata(path).and_then(|m| m.modified()) {
                modified = Some(modified.map_or(t, |m| m.max(t)));
            }
        };
        if let Some(version) = &current {
            let vdir = dir.join(version);
            for entry in
                fs::read_dir(&vdir).map_err(|e| Self::err(&vdir, format!("cannot list: {e}")))?
            {
                let entry = entry.map_err(|e| Self::err(&vdir, format!("cannot list: {e}")))?;
                let key = entry.file_name().to_string_lossy().into_owned();
                let path = entry.path();
                if key == ANNOTATIONS {
                    annotations =
                        serde_json::from_slice(&Self::read_file(&path)?).map_err(|e| {
                            Self::err(
                                &path,
                                format!(
                                    "is not valid JSON ({e}); delete it to reset certgen's records"
                                ),
                            )
                        })?;
                } else if !key.starts_with('.') && entry.file_type().is_ok_and(|t| t.is_file()) {
                    saw(&path);
                    data.insert(key, Self::read_file(&path)?);
                }
            }
        } else {
            for entry in
                fs::read_dir(&dir).map_err(|e| Self::err(&dir, format!("cannot list: {e}")))?
            {
                let entry = entry.map_err(|e| Self::err(&dir, format!("cannot list: {e}")))?;
                let key = entry.file_name().to_string_lossy().into_owned();
                if key.starts_with('.') {
                    continue; // temp files, editors' swap files
                }
                let path = entry.path();
                let meta = fs::symlink_metadata(&path)
                    .map_err(|e| Self::err(&path, format!("cannot read: {e}")))?;
                if meta.file_type().is_symlink() {
                    return Err(Self::err(
                        &path,
                        "is a symbolic link; certgen does not follow links: replace it with a regular file",
                    ));
                }
                if meta.is_file() {
                    saw(&path);
                    data.insert(key, Self::read_file(&path)?);
                }
            }
        }
        if data.is_empty() {
            return Ok(None);
        }
        let divergent = if current.is_some() {
            data.iter()
                .filter_map(|(key, value)| visible(&dir, key, value).transpose())
                .collect::<Result<_, _>>()?
        } else {
            Vec::new() // plain files: what certgen reads is what consumers read
        };
        Ok(Some(Contents {
            data,
            annotations,
            current,
            divergent,
            modified,
        }))
    }
}

/// What consumers find at `dir/key`, when it is not the link into `..data` holding `value`.
fn visible(dir: &Path, key: &str, value: &[u8]) -> Result<Option<Divergence>, StoreError> {
    let path = dir.join(key);
    let found = match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Found::Missing,
        Err(e) => return Err(LocalStore::err(&path, format!("cannot read: {e}"))),
        Ok(m) if m.file_type().is_symlink() => {
            let target = fs::read_link(&path)
                .map_err(|e| LocalStore::err(&path, format!("cannot read: {e}")))?;
            if target == Path::new(DATA).join(key) {
                return Ok(None);
            }
            Found::Foreign
        }
        Ok(m) if m.is_file() && m.len() <= value.len() as u64 => {
            let seen = LocalStore::read_file(&path)?;
            if seen == value {
                Found::Copy
            } else if value.starts_with(&seen) {
                Found::Truncated
            } else {
                Found::Foreign
            }
        }
        Ok(_) => Found::Foreign,
    };
    Ok(Some(Divergence {
        key: key.to_string(),
        path: path.display().to_string(),
        found,
    }))
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
        let type_ = if data.contains_key("tls.crt") || data.contains_key("tls.key") {
            TYPE_TLS
        } else {
            TYPE_OPAQUE
        };
        // The `..data` link is made afresh by every write of certgen's: its own time is the
        // write's. Another tool's write through the links (or of plain files) shows in the
        // files' own times: the newest of them all is the last write.
        let written_at = fs::symlink_metadata(self.dir(name).join(DATA))
            .and_then(|m| m.modified())
            .ok()
            .into_iter()
            .chain(modified)
            .max()
            .map(time::OffsetDateTime::from);
        Ok(Observed::Present(StoredSecret {
            name: name.to_string(),
            type_: type_.to_string(),
            version: digest(&data),
            written_at,
            data,
            labels: BTreeMap::new(),
            annotations: contents.annotations,
            owners: Vec::new(),
            divergent: contents.divergent,
        }))
    }

    async fn put(&self, write: &SecretWrite) -> Result<(), StoreError> {
        let dir = self.dir(&write.name);
        let current = self.read(&write.name)?;
        match (&write.expect, &current) {
            (Expect::Absent, None) => {}
            (Expect::Version(v), Some(c)) if *v == digest(&c.data) => {}
            (Expect::Absent, Some(_)) => {
                return Err(StoreError::Conflict {
                    what: dir.display().to_string(),
                    detail: "it was created by someone else after certgen found it missing".into(),
                });
            }
            (Expect::Version(_), _) => {
                return Err(StoreError::Conflict {
                    what: dir.display().to_string(),
                    detail: "its files changed after certgen read them".into(),
                });
            }
        }
        let (mut data, mut annotations, old_version) = match current {
            Some(c) => (c.data, c.annotations, c.current),
            None => (BTreeMap::new(), BTreeMap::new(), None),
        };
        let old_keys: Vec<String> = data.keys().cloned().collect();
        data.extend(write.data.iter().map(|(k, v)| (k.clone(), v.clone())));
        for key in &write.remove {
            data.remove(key);
        }
        annotations.extend(write.annotations.clone());
        let secret_key = |k: &str| {
            write.secret_keys.iter().any(|s| s == k) || k.ends_with(".key") || k.contains("secret")
        };

        make_dir(&dir)?;
        // 1. Every key of the new version in a fresh hidden directory, not yet synced.
        let version = format!("..{}", hex(&crate::pki::random_bytes(8)));
        let vdir = dir.join(&version);
        make_dir(&vdir)?;
        for (key, value) in &data {
            write_file(
                &vdir.join(key),
                value,
                if secret_key(key) { 0o600 } else { 0o644 },
            )?;
        }
        let json = serde_json::to_vec_pretty(&annotations).expect("annotations serialize");
        write_file(&vdir.join(ANNOTATIONS), &json, 0o600)?;
        let ticket = {
            let mut state = self.state();
            state.staged += 1;
            state.staged
        };
        // 2. Let the run's other writes stage theirs, so one sync covers them all.
        tokio::task::yield_now().await;
        // 3. This version, and every switch made before, durable before this switch is made.
        {
            let mut state = self.state();
            if state.synced < ticket {
                self.sync_all(&mut state)?;
            }
        }
        // 4. One rename switches every key at once.
        swap_symlink(&dir, DATA, Path::new(&version))?;
        // 5. Each key is a link into ..data (replacing plain files of other tools, and whatever
        // stood in for a link, atomically).
        for key in data.keys() {
            swap_symlink(&dir, key, &Path::new(DATA).join(key))?;
        }
        for key in old_keys.iter().filter(|k| !data.contains_key(*k)) {
            let _ = fs::remove_file(dir.join(key));
        }
        let mut state = self.state();
        state.switched = true;
        if let Some(old) = old_version {
            state.obsolete.push(dir.join(old));
        }
        Ok(())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let mut state = self.state();
        if state.switched || !state.obsolete.is_empty() {
            self.sync_all(&mut state)?;
        }
        Ok(())
    }
}

impl Drop for LocalStore {
    /// A caller that never flushed still gets its last switches synced and old versions removed
    /// (errors cannot be reported here; `flush` reports them).
    fn drop(&mut self) {
        let mut state = self.state();
        if state.switched || !state.obsolete.is_empty() {
            let _ = self.sync_all(&mut state);
        }
    }
}

fn make_dir(dir: &Path) -> Result<(), StoreError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| fs::set_permissions(dir, fs::Permissions::from_mode(0o700)))
        .map_err(|e| LocalStore::err(dir, format!("cannot create directory: {e}")))
}

fn write_file(path: &Path, value: &[u8], mode: u32) -> Result<(), StoreError> {
    let result = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)?;
        f.write_all(value)?;
        // The mode again, whatever the umask took away (on the open file: no path lookup).
        f.set_permissions(fs::Permissions::from_mode(mode))
    })();
    result.map_err(|e| LocalStore::err(path, format!("cannot write: {e}")))
}

/// Points `dir/name` at `target` atomically: a new link when nothing is there yet (a new
/// Secret, a missing name), else a temporary link renamed over what is there.
fn swap_symlink(dir: &Path, name: &str, target: &Path) -> Result<(), StoreError> {
    match std::os::unix::fs::symlink(target, dir.join(name)) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(LocalStore::err(
                &dir.join(name),
                format!("cannot write: {e}"),
            ));
        }
    }
    let tmp = dir.join(format!(
        ".{name}.certgen-{}",
        hex(&crate::pki::random_bytes(6))
    ));
    let result =
        std::os::unix::fs::symlink(target, &tmp).and_then(|()| fs::rename(&tmp, dir.join(name)));
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        LocalStore::err(&dir.join(name), format!("cannot write: {e}"))
    })
}

#[cfg(test)]
mod tests {
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
    fn a_run_of_writes_costs_three_syncs_and_leaves_one_version_each() {
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
        assert_eq!(store.state().syncs, 3);
        // A rewrite of one Secret: one sync before its switch, one at flush; the old version
        // directory goes once the switch is durable.
        let v = get(&store, "a").version;
        block_on(async {
            store
                .put(&write("a", Expect::Version(v), "a2"))
                .await
                .unwrap();
            store.flush().await.unwrap();
        });
        assert_eq!(store.state().syncs, 5);
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
        assert_eq!(store.state().syncs, 5);
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
        assert_eq!(read.annotations.len(), 2, "{:?}", read.annotations);
        assert_eq!(read.divergent, vec![]);

        let hmac = SecretWrite {
            type_: TYPE_OPAQUE,
            data: BTreeMap::from([("hmac-secret".to_string(), vec![1; 32])]),
            ..write("hmac", Expect::Absent, "")
        };
        block_on(store.put(&hmac)).unwrap();
        assert_eq!(get(&store, "hmac").type_, TYPE_OPAQUE);
    }

    #[test]
    fn another_tools_plain_files_are_read_as_they_are_and_moved_to_links_on_write() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("envoy");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("tls.crt"), "theirs").unwrap();
        fs::write(dir.join("tls.key"), "key").unwrap();
        fs::write(dir.join(".swap"), "ignored").unwrap();
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
        assert!(err.contains("replace it with a regular file"), "{err}");

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
