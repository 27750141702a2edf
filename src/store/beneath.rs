//! File operations beneath a directory that never follow a symbolic link, and the trust rules
//! for what local mode reads (OpenSSH's StrictModes, applied to `--local DIR`).
//!
//! Every path certgen opens, creates, renames or removes under `DIR` goes through here: one
//! name at a time, relative to an open directory (`openat(2)` and friends), so no path is looked
//! up twice and no component can be swapped for a link between a check and its use. Opens use
//! `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it (Linux
//! 5.6+), else `openat(2)` with `O_NOFOLLOW` (each name is one component, so the two refuse the
//! same things). Creating, renaming and removing never follow a link in the last component, and
//! names never hold a `/`. No `unsafe`: rustix wraps the system calls.
//!
//! Trust, checked on every directory and file before it is used: owned by the user running
//! certgen and not writable by group or others. A private key others may read is made 0600 by
//! a run (which owns it) and reported by `certgen check`. `DIR`
//! may also be owned by root, and each directory above it must be owned by root or the user and
//! not writable by others unless sticky (`/tmp`), so nobody else can move `DIR` away. This module
//! must not know what a Secret is.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

/// `openat2` availability: 0 unknown, 1 available, 2 not (old kernel, or a seccomp filter).
static OPENAT2: AtomicU8 = AtomicU8::new(0);

/// Why a name could not be used: an IO error, or a trust rule it breaks (with the fix).
#[derive(Debug)]
pub enum Refusal {
    Io(io::Error),
    /// The message says what is wrong and how to fix it.
    Untrusted(String),
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<rustix::io::Errno> for Refusal {
    fn from(e: rustix::io::Errno) -> Self {
        Self::Io(e.into())
    }
}

/// What stands at a name, not following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Link,
    Other,
}

fn kind_of(mode: u32) -> Kind {
    match rustix::fs::FileType::from_raw_mode(mode) {
        rustix::fs::FileType::RegularFile => Kind::File,
        rustix::fs::FileType::Directory => Kind::Dir,
        rustix::fs::FileType::Symlink => Kind::Link,
        _ => Kind::Other,
    }
}

/// The user certgen runs as (asked once: every trust check compares with it).
pub fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EUID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Opens `name` in `dir` with `flags`, never following a link and never leaving `dir`.
fn open(dir: BorrowedFd<'_>, name: &str, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    debug_assert!(!name.contains('/') && name != ".." && !name.is_empty());
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let mode = Mode::from_raw_mode(mode);
    if OPENAT2.load(Ordering::Relaxed) != 2 {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
        match rustix::fs::openat2(dir, name, flags, mode, resolve) {
            Err(rustix::io::Errno::NOSYS) | Err(rustix::io::Errno::PERM) => {
                OPENAT2.store(2, Ordering::Relaxed);
            }
            other => {
                OPENAT2.store(1, Ordering::Relaxed);
                return Ok(other?);
            }
        }
    }
    Ok(rustix::fs::openat(dir, name, flags, mode)?)
}

/// What is at `name` in `dir`, not following a link; `None` when nothing is.
pub fn kind(dir: BorrowedFd<'_>, name: &str) -> io::Result<Option<Kind>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(kind_of(st.st_mode))),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The modification time of `name` itself (a link's own time), in seconds and nanoseconds.
pub fn mtime(dir: BorrowedFd<'_>, name: &str) -> io::Result<(i64, u32)> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok((st.st_mtime as i64, st.st_mtime_nsec as u32))
}

/// Why `name` cannot be opened as a `want`: a link, or something else than expected.
fn not_a(dir: BorrowedFd<'_>, name: &str, want: Kind, e: io::Error) -> Refusal {
    match kind(dir, name) {
        Ok(Some(Kind::Link)) => Refusal::Untrusted(
            "is a symbolic link; certgen does not follow links under --local DIR: replace it with a real one"
                .into(),
        ),
        Ok(Some(found)) if found != want => Refusal::Untrusted(format!(
            "is a {}, not a {}; move it away",
            noun(found),
            noun(want)
        )),
        _ => Refusal::Io(e),
    }
}

fn noun(kind: Kind) -> &'static str {
    match kind {
        Kind::File => "regular file",
        Kind::Dir => "directory",
        Kind::Link => "symbolic link",
        Kind::Other => "special file",
    }
}

/// Opens the directory `name` in `dir` (no link followed), trusted: a directory under `DIR` (a
/// Secret's, a version's) must be owned by the user running certgen and not writable by group
/// or others. `None` when it does not exist.
pub fn open_dir(dir: BorrowedFd<'_>, name: &str) -> Result<Option<OwnedFd>, Refusal> {
    Ok(open_dir_stat(dir, name)?.map(|(fd, _)| fd))
}

/// [`open_dir`], with the mode the directory had when it was checked.
fn open_dir_stat(dir: BorrowedFd<'_>, name: &str) -> Result<Option<(OwnedFd, u32)>, Refusal> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY;
    match open(dir, name, flags, 0) {
        Ok(fd) => {
            let st = rustix::fs::fstat(&fd)?;
            trusted(&st, 0o022)?;
            Ok(Some((fd, st.st_mode & 0o7777)))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(not_a(dir, name, Kind::Dir, e)),
    }
}

/// A directory [`make_dir`] opened: whether this call created it (so `dir` has a new entry to
/// make durable).
pub struct MadeDir {
    pub fd: OwnedFd,
    pub created: bool,
}

/// Creates the directory `name` in `dir` with `mode` unless it exists, opens it, and gives it
/// `mode` if it has another (a run tightens the modes of what it owns; a new directory has it
/// unless the umask took bits away).
pub fn make_dir(dir: BorrowedFd<'_>, name: &str, mode: u32) -> Result<MadeDir, Refusal> {
    let created = match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => return Err(e.into()),
    };
    let (fd, had) =
        open_dir_stat(dir, name)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    if had != mode {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    }
    Ok(MadeDir { fd, created })
}

/// How a private key that group or others may read is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposed {
    /// Not a private key: no rule.
    Public,
    /// Made 0600 on the open file (a run tightens the modes of what it owns).
    Tighten,
    /// Left as it is, and reported (`certgen check` changes nothing).
    Report,
}

/// A file as read: its bytes, its modification time (seconds, nanoseconds), and the mode it had
/// when a private key was readable by group or others (tightened, or to be reported, as
/// [`Exposed`] said).
pub struct FileRead {
    pub bytes: Vec<u8>,
    pub modified: (i64, u32),
    pub exposed: Option<u32>,
}

/// Reads the regular file `name` in `dir`, at most `limit` bytes (more is refused). No link is
/// followed, a FIFO or device is refused without blocking on it, and the file must be trusted
/// (owned by this user, not writable by group or others).
pub fn read_file(
    dir: BorrowedFd<'_>,
    name: &str,
    limit: u64,
    key: Exposed,
) -> Result<FileRead, Refusal> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK;
    let fd = open(dir, name, flags, 0).map_err(|e| not_a(dir, name, Kind::File, e))?;
    let st = rustix::fs::fstat(&fd)?;
    if kind_of(st.st_mode) != Kind::File {
        return Err(Refusal::Untrusted(format!(
            "is a {}, not a regular file; move it away",
            noun(kind_of(st.st_mode))
        )));
    }
    trusted(&st, 0o022)?;
    let mode = st.st_mode & 0o7777;
    let exposed = (key != Exposed::Public && mode & 0o077 != 0).then_some(mode);
    if exposed.is_some() && key == Exposed::Tighten {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
    }
    if st.st_size as u64 > limit {
        return Err(Refusal::Untrusted(format!(
            "is larger than {}; it cannot be a certificate or key certgen wrote",
            size(limit)
        )));
    }
    // Room for the whole file and one byte more: one read fills it, one more finds the end.
    let mut bytes = Vec::with_capacity(st.st_size as usize + 1);
    File::from(fd).take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(Refusal::Untrusted(format!(
            "is larger than {}; it cannot be a certificate or key certgen wrote",
            size(limit)
        )));
    }
    Ok(FileRead {
        bytes,
        modified: (st.st_mtime as i64, st.st_mtime_nsec as u32),
        exposed,
    })
}

fn size(limit: u64) -> String {
    if limit >= 1 << 20 && limit.is_multiple_of(1 << 20) {
        format!("{} MiB", limit >> 20)
    } else {
        format!("{limit} bytes")
    }
}

/// Creates the file `name` in `dir` (it must not exist: a link there is not followed) with
/// `mode`, whatever the umask, and writes `value`. The file is not synced: the open file is
/// handed back for [`sync_all`].
pub fn create_file(
    dir: BorrowedFd<'_>,
    name: &str,
    value: &[u8],
    mode: u32,
) -> io::Result<OwnedFd> {
    use std::io::Write;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
    let fd = open(dir, name, flags, mode)?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    let mut file = File::from(fd);
    file.write_all(value)?;
    Ok(file.into())
}

/// Opens (creating it with `mode` if missing) the file `name` in `dir` for writing, never
/// through a link; an existing file must be certgen's user's, and gets `mode`.
pub fn open_or_create(dir: BorrowedFd<'_>, name: &str, mode: u32) -> Result<File, Refusal> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK;
    let fd = open(dir, name, flags, mode).map_err(|e| not_a(dir, name, Kind::File, e))?;
    let st = rustix::fs::fstat(&fd)?;
    if kind_of(st.st_mode) != Kind::File {
        return Err(Refusal::Untrusted(format!(
            "is a {}, not a regular file; move it away",
            noun(kind_of(st.st_mode))
        )));
    }
    trusted(&st, 0)?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
    Ok(File::from(fd))
}

/// The target of the link `name` in `dir`; `None` when nothing is there.
pub fn read_link(dir: BorrowedFd<'_>, name: &str) -> io::Result<Option<String>> {
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => Ok(Some(target.to_string_lossy().into_owned())),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What stands at `name` in `dir` when it is a link: its target; otherwise what it is (one
/// system call for a link, two for anything else).
pub fn link_or_kind(dir: BorrowedFd<'_>, name: &str) -> io::Result<Result<String, Option<Kind>>> {
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => Ok(Ok(target.to_string_lossy().into_owned())),
        Err(rustix::io::Errno::NOENT) => Ok(Err(None)),
        Err(rustix::io::Errno::INVAL) => Ok(Err(kind(dir, name)?)),
        Err(e) => Err(e.into()),
    }
}

/// Creates the link `name` → `target` in `dir`.
pub fn symlink(dir: BorrowedFd<'_>, name: &str, target: &str) -> io::Result<()> {
    Ok(rustix::fs::symlinkat(target, dir, name)?)
}

/// Renames `from` to `to` in `dir`, replacing what `to` is (never through a link: the link
/// itself is replaced).
pub fn rename(dir: BorrowedFd<'_>, from: &str, to: &str) -> io::Result<()> {
    Ok(rustix::fs::renameat(dir, from, dir, to)?)
}

/// Removes the file or link `name` in `dir` (not a directory); nothing there is fine.
pub fn remove_file(dir: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes `name` in `dir` and, if it is a directory, everything in it, never following a
/// link (a link is removed, not what it points to).
pub fn remove_tree(dir: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    match kind(dir, name)? {
        None => Ok(()),
        Some(Kind::Dir) => {
            let sub = open(dir, name, OFlags::RDONLY | OFlags::DIRECTORY, 0)?;
            for (entry, _) in list(sub.as_fd())? {
                remove_tree(sub.as_fd(), &entry)?;
            }
            match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        Some(_) => remove_file(dir, name),
    }
}

/// The names in the directory `dir` (without `.` and `..`) and what each is. Reads from the
/// descriptor's position: list a directory once per descriptor, right after opening it. The
/// kind comes with each name (`getdents64`'s `d_type`); only a file system that does not give it
/// costs a `stat` per name.
pub fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<(String, Kind)>> {
    let mut out = Vec::new();
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
    let mut entries = rustix::fs::RawDir::new(dir, &mut buf);
    while let Some(entry) = entries.next() {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let kind = match entry.file_type() {
            rustix::fs::FileType::RegularFile => Kind::File,
            rustix::fs::FileType::Directory => Kind::Dir,
            rustix::fs::FileType::Symlink => Kind::Link,
            rustix::fs::FileType::Unknown => match kind(dir, &name)? {
                Some(k) => k,
                None => continue, // removed meanwhile
            },
            _ => Kind::Other,
        };
        out.push((name, kind));
    }
    Ok(out)
}

/// Makes each of `fds` durable (`fsync(2)`), all at once: up to [`SYNC_THREADS`] threads, each
/// taking the next descriptor. Concurrent fsyncs share the device's cache flushes (the block
/// layer merges flushes that wait together) and a journal's commits, so a round costs about
/// one flush, where one fsync after another costs one each. Only what certgen wrote is written
/// out: unlike `syncfs(2)`, other processes' unwritten data on the same file system is left
/// alone. The first error is returned, after every descriptor was tried.
pub fn sync_all(fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    use std::sync::atomic::AtomicUsize;
    let next = AtomicUsize::new(0);
    let first_error = std::sync::Mutex::new(None);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(fd) = fds.get(i) else { break };
            if let Err(e) = rustix::fs::fsync(fd) {
                first_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(io::Error::from(e));
            }
        }
    };
    let helpers = fds.len().min(SYNC_THREADS).saturating_sub(1);
    std::thread::scope(|scope| {
        for _ in 0..helpers {
            // A thread that cannot start leaves its share to the others.
            let _ = std::thread::Builder::new().spawn_scoped(scope, work);
        }
        work();
    });
    match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// How many fsyncs [`sync_all`] has in flight at once.
pub const SYNC_THREADS: usize = 16;

/// Makes `DIR` (mode 0700) and the directories above it that are missing, each one's name made
/// durable in its parent (`DIR`'s own entries are synced with the writes into it).
fn make_root(root: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let missing: Vec<&Path> = root
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
        .collect();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let parents = missing
        .iter()
        .filter_map(|p| p.parent())
        .map(|p| match p.as_os_str().is_empty() {
            true => rustix::fs::open(".", flags, Mode::empty()),
            false => rustix::fs::open(p, flags, Mode::empty()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    sync_all(&parents.iter().map(AsFd::as_fd).collect::<Vec<_>>())
}

/// Refuses what another user owns, or what has any of the `forbidden` mode bits.
fn trusted(st: &rustix::fs::Stat, forbidden: u32) -> Result<(), Refusal> {
    let me = euid();
    let owner = st.st_uid;
    let mode = st.st_mode & 0o7777;
    if owner != me {
        return Err(Refusal::Untrusted(format!(
            "is owned by uid {owner}, not by the user running certgen (uid {me}); another user could change what certgen trusts: remove it, or `chown {me}` it if its contents are known to be yours"
        )));
    }
    if mode & forbidden != 0 {
        return Err(Refusal::Untrusted(format!(
            "has mode {mode:04o}, writable by group or others; certgen refuses what others may change: check its contents, then `chmod go-w` it (or remove it)"
        )));
    }
    Ok(())
}

/// Opens `DIR`, creating it (mode 0700, parents too) when `create` is set; `None` when it does
/// not exist and is not to be created. `DIR` and every directory above it must be trusted:
/// owned by root or the user running certgen, and not writable by others (unless sticky, as
/// `/tmp` is: then only their owners may move entries); `DIR` itself not writable by group
/// either.
pub fn open_root(root: &Path, create: bool) -> Result<Option<OwnedFd>, (String, Refusal)> {
    let at = |p: &Path, r: Refusal| (p.display().to_string(), r);
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(root, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) if create => {
            make_root(root).map_err(|e| at(root, e.into()))?;
            rustix::fs::open(root, flags, Mode::empty()).map_err(|e| at(root, e.into()))?
        }
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(at(root, e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| at(root, e.into()))?;
    let me = euid();
    let owner = st.st_uid;
    let mode = st.st_mode & 0o7777;
    if owner != me && owner != 0 {
        return Err(at(
            root,
            Refusal::Untrusted(format!(
                "is owned by uid {owner}, not by the user running certgen (uid {me}) or root; another user could replace the certificates certgen trusts: use a directory of your own (for example `install -d -m 700 DIR`)"
            )),
        ));
    }
    if mode & 0o022 != 0 {
        return Err(at(
            root,
            Refusal::Untrusted(format!(
                "has mode {mode:04o}, writable by group or others; another user could replace the certificates certgen trusts: `chmod go-w` it, or use a directory of your own"
            )),
        ));
    }
    // The directories above: nobody else may move DIR away or put another in its place.
    let real = std::fs::canonicalize(root).map_err(|e| at(root, e.into()))?;
    for parent in real.ancestors().skip(1) {
        let meta = std::fs::metadata(parent).map_err(|e| at(parent, e.into()))?;
        use std::os::unix::fs::MetadataExt;
        let (owner, mode) = (meta.uid(), meta.mode() & 0o7777);
        if owner != me && owner != 0 {
            return Err(at(
                parent,
                Refusal::Untrusted(format!(
                    "(above --local {}) is owned by uid {owner}, not by root or the user running certgen (uid {me}); its owner could replace the directory: use a directory below one only you and root control",
                    root.display()
                )),
            ));
        }
        if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            return Err(at(
                parent,
                Refusal::Untrusted(format!(
                    "(above --local {}) has mode {mode:04o}: anyone may move the directory away and put another in its place; use a directory below one only you and root control, or make this one sticky (`chmod +t`)",
                    root.display()
                )),
            ));
        }
    }
    Ok(Some(fd))
}
