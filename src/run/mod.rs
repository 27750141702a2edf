//! The runtime layer: one module per command's job, each wiring the pure core to the
//! outside world (the Kubernetes adapter or the local directory) for one run. The crate root
//! parses the command line, sets up logging and dispatches here; nothing here calls back up.
//!
//! - [`job`]: the main job (a run, its Events and metrics), in a cluster or locally;
//! - [`cluster`]: the rotation driver wired to the API server, shared by the main job and
//!   `create`'s renewal ([`kwc`]);
//! - [`check`]: `certgen check`; [`exporter`]: `certgen exporter`;
//! - [`kwc`]: `certgen create` and `patch`; [`handover`]: `certgen handover cert-manager`.

use std::io::Write;

use crate::config;
use crate::error::Error;
use crate::store::LocalStore;

pub mod check;
pub mod cluster;
pub mod exporter;
pub mod handover;
pub mod job;
pub mod kwc;
pub mod set;

pub fn print(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`certgen man | head`) is not an error worth reporting.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::Output(format!(
            "cannot write to standard output: {e}"
        ))),
    }
}

/// The local store for `config` in `dir`: the private keys of its layouts (HMAC keys
/// included) are kept 0600, and with `--force` a Secret whose `..data` link dangles is written
/// afresh.
pub(crate) fn local_store(
    dir: &std::path::Path,
    config: &config::Config,
    force: bool,
) -> LocalStore {
    LocalStore::new(dir)
        .replacing_dangling(force)
        .with_secret_keys(config.private_data_keys())
}
