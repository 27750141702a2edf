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
    /// A failure after this run had already written: what would be exit 2 (bad input, a local
    /// file error) becomes exit 5, since "nothing was written" no longer holds; an API failure
    /// (exit 5: a quota, a missing verb, a 422 midway) keeps its code. Either way the message
    /// and the JSON error name what was written.
    #[error(
        "{source} (after this run had written {}; every bundle still trusts every leaf written, so fix the cause and re-run)",
        written.join(", ")
    )]
    AfterWrites {
        /// The objects written (or partly written) before the failure.
        written: Vec<String>,
        source: Box<Error>,
    },
    /// A single-cluster run in a member of a set of clusters found the shared CA due (or was
    /// asked to rotate it): only a run over the set's contexts may change that CA.
    #[error("{object}: {message}")]
    SharedCaDue { object: String, message: String },
    /// What ended a run over a set of clusters, in one member (named by its context).
    #[error("member {member}: {source}")]
    Member { member: String, source: Box<Error> },
    /// An outcome already reported on standard output (a failed check): exit 1, print nothing.
    #[error("action is due")]
    CheckFailed,
    /// An error the run's JSON report on standard output already holds (`error`): exit with
    /// its code, and do not print it there again.
    #[error(transparent)]
    Reported(Box<Error>),
}

/// An error as one JSON object, for `--output json` (standard output) and `--log-format json`
/// (standard error): what kind of error, on which object, the message, and the exit code.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorObject {
    /// A stable name: `usage`, `config`, `invalid-input`, `local-file`, `api`, `conflict`, `locked`,
    /// `timeout`, ... (the cause's, for an error after writes).
    pub kind: &'static str,
    /// The file, Secret or field the error is about, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    pub message: String,
    pub exit_code: u8,
    /// What this run had written before it failed (then the exit code is never 2).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub written: Vec<String>,
}

impl Error {
    /// The process exit code for this error.
    pub fn code(&self) -> u8 {
        match self {
            Self::Config(_) | Self::Invalid(_) | Self::Issue(_) | Self::Output(_) => USAGE,
            Self::Store(StoreError::Local { .. }) => USAGE,
            Self::Store(StoreError::Partial { .. }) => API,
            Self::Store(StoreError::Api(_)) | Self::Connect(_) => API,
            Self::Store(StoreError::Conflict { .. }) | Self::Contended { .. } => CONTENDED,
            Self::Verification(_) | Self::CheckFailed | Self::SharedCaDue { .. } => FAILED,
            Self::Member { source, .. } => source.code(),
            Self::Timeout(_) | Self::Unfinished(_) => TIMEOUT,
            Self::Locked(_) | Self::LockLost => CONTENDED,
            Self::AfterWrites { source, .. } => match source.code() {
                USAGE => API,
                code => code,
            },
            Self::Reported(inner) => inner.code(),
        }
    }

    /// A stable name for what kind of error this is (an error after writes: its cause's).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config(e) if e.source_name == "command line" => "usage",
            Self::Config(_) => "config",
            Self::Invalid(_) => "invalid-input",
            Self::Store(StoreError::Local { .. }) => "local-file",
            Self::Store(StoreError::Partial { .. }) => "partial-write",
            Self::Store(StoreError::Api(_)) => "api",
            Self::Store(StoreError::Conflict { .. }) | Self::Contended { .. } => "conflict",
            Self::Connect(_) => "connect",
            Self::Issue(_) => "issue",
            Self::Output(_) => "output",
            Self::Verification(_) => "verification",
            Self::Timeout(_) => "timeout",
            Self::Locked(_) => "locked",
            Self::LockLost => "lock-lost",
            Self::Unfinished(_) => "unfinished",
            Self::CheckFailed => "check-failed",
            Self::SharedCaDue { .. } => "shared-ca-due",
            Self::Member { source, .. } => source.kind(),
            Self::AfterWrites { source, .. } | Self::Reported(source) => source.kind(),
        }
    }

    /// The file, Secret or config source this error is about, when there is one.
    pub fn object(&self) -> Option<String> {
        match self {
            Self::Config(e) => Some(e.source_name.clone()),
            Self::Invalid(e) => Some(e.object.clone()),
            Self::SharedCaDue { object, .. } => Some(object.clone()),
            Self::Member { source, .. } => source.object(),
            Self::Store(e) | Self::Contended { last: e, .. } => match e {
                StoreError::Local { path, .. } | StoreError::Partial { path, .. } => {
                    Some(path.clone())
                }
                StoreError::Conflict { what, .. } => Some(what.clone()),
                StoreError::Api(a) if a.namespace.is_empty() => {
                    Some(format!("{} {}", a.resource, a.name))
                }
                StoreError::Api(a) => Some(format!("{} {}/{}", a.resource, a.namespace, a.name)),
            },
            Self::AfterWrites { source, .. } | Self::Reported(source) => source.object(),
            _ => None,
        }
    }

    /// This error as one JSON object ([`ErrorObject`]).
    pub fn to_object(&self) -> ErrorObject {
        let written = match self {
            Self::AfterWrites { written, .. } => written.clone(),
            Self::Reported(inner) => return inner.to_object(),
            _ => Vec::new(),
        };
        ErrorObject {
            kind: self.kind(),
            object: self.object(),
            message: self.to_string(),
            exit_code: self.code(),
            written,
        }
    }

    /// As a process exit code.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code())
    }
}

impl Error {
    /// This error, for a run that has written `written` (or partly, when a write failed
    /// midway): exit 2 promises nothing was, so after a write it becomes exit 5; every exit 5
    /// names what was written, in the message and in the JSON error's `written`.
    pub fn after(self, written: Vec<String>) -> Self {
        let partial = matches!(self, Self::Store(StoreError::Partial { .. }));
        let named = matches!(self.code(), USAGE | API) || partial;
        if written.is_empty() || !named || matches!(self, Self::AfterWrites { .. }) {
            self
        } else {
            Self::AfterWrites {
                written,
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
