//! The one error type that ends a run early, and the exit code ([`crate::exit`]) each maps to.
//! Only `main` turns it into the process's exit status.

use std::process::ExitCode;

use crate::config::ConfigError;
use crate::exit::{API, CONTENDED, FAILED, TIMEOUT, USAGE};
use crate::plan::Invalid;
use crate::store::StoreError;

/// Everything that ends a run early.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error(transparent)]
    Store(StoreError),
    #[error(
        "gave up after {attempts} attempts, each lost a race with another writer: {last}; re-run certgen"
    )]
    Contended { attempts: u32, last: StoreError },
    #[error("cannot connect to Kubernetes: {0}")]
    Connect(String),
    #[error("{0}")]
    Issue(#[from] crate::pki::IssueError),
    #[error("{0}")]
    Output(String),
    #[error("{0}")]
    Verification(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("{0}")]
    Locked(String),
    #[error(
        "the run lock was lost (not renewed in time, or taken over by another run); stopped before the next write. Every bundle still trusts every leaf written; re-run certgen to finish"
    )]
    LockLost,
    #[error(
        "stopped after {0} steps without finishing; nothing is left half-trusted: re-run certgen to finish"
    )]
    Unfinished(usize),
    /// What would be exit 2 (bad input, a local file error) after this run had already
    /// written: exit 5, since "nothing was written" no longer holds.
    #[error(
        "{source} (after {writes} write(s) in this run; every bundle still trusts every leaf written, so fix the cause and re-run)"
    )]
    AfterWrites { writes: usize, source: Box<Error> },
    /// An outcome already reported on standard output (a failed check): exit 1, print nothing.
    #[error("action is due")]
    CheckFailed,
}

impl Error {
    /// The process exit code for this error.
    pub fn code(&self) -> u8 {
        match self {
            Self::Config(_) | Self::Invalid(_) | Self::Issue(_) | Self::Output(_) => USAGE,
            Self::Store(StoreError::Local { .. }) => USAGE,
            Self::Store(StoreError::Api(_)) | Self::Connect(_) => API,
            Self::Store(StoreError::Conflict { .. }) | Self::Contended { .. } => CONTENDED,
            Self::Verification(_) | Self::CheckFailed => FAILED,
            Self::Timeout(_) | Self::Unfinished(_) => TIMEOUT,
            Self::Locked(_) | Self::LockLost => CONTENDED,
            Self::AfterWrites { source, .. } => match source.code() {
                USAGE => API,
                code => code,
            },
        }
    }

    /// As a process exit code.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code())
    }
}

impl Error {
    /// This error, for a run that has written `writes` times: exit 2 promises nothing was.
    pub fn after(self, writes: usize) -> Self {
        if writes == 0 || self.code() != USAGE {
            self
        } else {
            Self::AfterWrites {
                writes,
                source: Box::new(self),
            }
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}
