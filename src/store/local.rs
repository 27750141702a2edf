//! The local store: Envoy Gateway's layout, one directory per Secret and one file per key
//! (`DIR/<secret>/{ca.crt,tls.crt,tls.key}`, `DIR/<hmac secret>/hmac-secret`).
//!
//! Each file is written atomically (temp file, fsync, rename); key files are 0600 and the
//! Secret directories 0700. Symbolic links are refused rather than followed. The version a write
//! must match is a SHA-256 digest of the directory's files, checked just before writing.

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

    fn read_dir(&self, name: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, StoreError> {
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
        let mut data = BTreeMap::new();
        let entries =
            fs::read_dir(&dir).map_err(|e| Self::err(&dir, format!("cannot list: {e}")))?;
        for entry in entries {
            let entry = entry.map_err(|e| Self::err(&dir, format!("cannot list: {e}")))?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if file_name.starts_with('.') {
                continue; // our own temp files, editors' swap files
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
            if !meta.is_file() {
                continue;
            }
            if meta.len() > MAX_FILE {
                return Err(Self::err(
                    &path,
                    "is larger than 1 MiB; it cannot be a certificate or key certgen wrote",
                ));
            }
            let bytes =
                fs::read(&path).map_err(|e| Self::err(&path, format!("cannot read: {e}")))?;
            data.insert(file_name, bytes);
        }
        Ok(if data.is_empty() { None } else { Some(data) })
    }
}

/// Where a Secret directory keeps certgen's annotations (rotation phase and times); hidden, so it
/// is not a data key.
const ANNOTATIONS: &str = ".certgen-annotations.json";

impl LocalStore {
    fn read_annotations(&self, name: &str) -> Result<BTreeMap<String, String>, StoreError> {
        let path = self.dir(name).join(ANNOTATIONS);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                Self::err(
                    &path,
                    format!("is not valid JSON ({e}); delete it to reset certgen's records"),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(Self::err(&path, format!("cannot read: {e}"))),
        }
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
        let Some(data) = self.read_dir(name)? else {
            return Ok(Observed::Absent);
        };
        let type_ = if data.contains_key("tls.crt") || data.contains_key("tls.key") {
            TYPE_TLS
        } else {
            TYPE_OPAQUE
        };
        Ok(Observed::Present(StoredSecret {
            name: name.to_string(),
            type_: type_.to_string(),
            version: digest(&data),
            data,
            labels: BTreeMap::new(),
            annotations: self.read_annotations(name)?,
            owners: Vec::new(),
        }))
    }

    async fn put(&self, write: &SecretWrite) -> Result<(), StoreError> {
        let dir = self.dir(&write.name);
        let current = self.read_dir(&write.name)?;
        match (&write.expect, &current) {
            (Expect::Absent, None) => {}
            (Expect::Version(v), Some(data)) if *v == digest(data) => {}
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
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Self::err(&dir, format!("cannot create directory: {e}")))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| Self::err(&dir, format!("cannot set permissions: {e}")))?;
        for (key, value) in &write.data {
            let mode = if write.secret_keys.contains(key) {
                0o600
            } else {
                0o644
            };
            write_atomic(&dir, key, value, mode)?;
        }
        for key in &write.remove {
            match fs::remove_file(dir.join(key)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Self::err(&dir.join(key), format!("cannot remove: {e}"))),
            }
        }
        if !write.annotations.is_empty() {
            let mut annotations = self.read_annotations(&write.name)?;
            annotations.extend(write.annotations.clone());
            let json = serde_json::to_vec_pretty(&annotations).expect("annotations serialize");
            write_atomic(&dir, ANNOTATIONS, &json, 0o600)?;
        }
        fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Self::err(&dir, format!("cannot sync directory: {e}")))?;
        Ok(())
    }
}

fn write_atomic(dir: &Path, key: &str, value: &[u8], mode: u32) -> Result<(), StoreError> {
    let target = dir.join(key);
    let tmp = dir.join(format!(
        ".{key}.certgen-{}",
        hex(&crate::pki::random_bytes(6))
    ));
    let result = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(value)?;
        f.sync_all()?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
        fs::rename(&tmp, &target)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        LocalStore::err(&target, format!("cannot write: {e}"))
    })
}
