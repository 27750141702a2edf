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

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{
    Expect, Observed, SecretStore, SecretWrite, StoreError, StoredSecret, TYPE_OPAQUE, TYPE_TLS,
    data_digest as digest,
};
use crate::pki::hex;

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
}

/// Secrets as directories under one root.
pub struct LocalStore {
    root: PathBuf,
}

impl LocalStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
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
                    data.insert(key, Self::read_file(&path)?);
                }
            }
        }
        if data.is_empty() {
            return Ok(None);
        }
        Ok(Some(Contents {
            data,
            annotations,
            current,
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
        let type_ = if data.contains_key("tls.crt") || data.contains_key("tls.key") {
            TYPE_TLS
        } else {
            TYPE_OPAQUE
        };
        // The `..data` link is made afresh by every write: its own time is the write's.
        let written_at = fs::symlink_metadata(self.dir(name).join(DATA))
            .and_then(|m| m.modified())
            .ok()
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
        // 1. Every key of the new version in a fresh hidden directory.
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
        sync_dir(&vdir)?;
        // 2. One rename switches every key at once.
        swap_symlink(&dir, DATA, Path::new(&version))?;
        // 3. Each key is a link into ..data (replacing plain files of other tools atomically).
        for key in data.keys() {
            swap_symlink(&dir, key, &Path::new(DATA).join(key))?;
        }
        for key in old_keys.iter().filter(|k| !data.contains_key(*k)) {
            let _ = fs::remove_file(dir.join(key));
        }
        sync_dir(&dir)?;
        if let Some(old) = old_version {
            let _ = fs::remove_dir_all(dir.join(old));
        }
        Ok(())
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

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LocalStore::err(dir, format!("cannot sync directory: {e}")))
}

fn write_file(path: &Path, value: &[u8], mode: u32) -> Result<(), StoreError> {
    let result = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)?;
        f.write_all(value)?;
        f.sync_all()?;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    })();
    result.map_err(|e| LocalStore::err(path, format!("cannot write: {e}")))
}

/// Points `dir/name` at `target` atomically (a temporary link renamed over it).
fn swap_symlink(dir: &Path, name: &str, target: &Path) -> Result<(), StoreError> {
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
