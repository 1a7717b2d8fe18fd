//! Why a command did not finish cleanly, and the exit code each reason
//! maps to (docs/contracts.md, "Exit codes"): users' scripts branch on them.
//!
//! An error's message says what failed, never its cause again: the cause is
//! its `source`, and [`crate::output::Chain`] prints the whole chain once.

use std::path::PathBuf;

use crate::policy::PolicyError;
use crate::report::Report;
use crate::runtime::RuntimeError;

/// The exit codes of docs/contracts.md, by name (`exit::OK` and so on): the
/// table itself is [`crate::exit_codes`], which build.rs also reads.
pub use crate::exit_codes as exit;

/// Why a command did not finish cleanly; each variant has its exit code.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot use {path}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another safeprune run holds the lock {}: nothing done", .0.display())]
    Locked(PathBuf),
    #[error(
        "the plan deletes {planned} objects, more than the limit of {limit}: nothing removed \
         (review it with `safeprune plan`, then raise safety.max_deletions or pass --max-deletions)"
    )]
    OverLimit {
        planned: usize,
        limit: u64,
        /// The refused plan, as a dry-run report.
        report: Box<Report>,
    },
    #[error("{failed} removals failed (see the report)")]
    RemovalsFailed { failed: usize },
    #[error("no container, image, volume or network matches '{query}' on {runtime}")]
    NotFound {
        query: String,
        runtime: &'static str,
    },
    /// A stop signal came before the runtime (`runtime.kind`) had answered
    /// with its inventory.
    #[error(
        "stopped by a signal before the inventory was taken (runtime.kind {runtime}): nothing removed"
    )]
    Stopped { runtime: &'static str },
    /// `run` on a terminal asked before removing, and was not told yes
    /// (why: `not confirmed`, or a stop signal before an answer).
    #[error("nothing removed ({0})")]
    NotConfirmed(&'static str),
    /// `check`: the policy is valid, but safeprune cannot work on this
    /// node with it; the checks that failed, by name, each said above.
    #[error("this node is not ready for the policy: {0} failed (see the lines above)")]
    NotReady(String),
    #[error("the daemon cannot wait for its schedule")]
    Daemon(#[source] std::io::Error),
    #[error("the daemon cannot listen on {addr} (metrics.listen)")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

impl AppError {
    /// The exit code of docs/contracts.md for this error.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Policy(_) | Self::Usage(_) => exit::USAGE,
            Self::Runtime(_)
            | Self::File { .. }
            | Self::NotReady(_)
            | Self::Daemon(_)
            | Self::Listen { .. } => exit::RUNTIME,
            Self::RemovalsFailed { .. } => exit::REMOVALS_FAILED,
            Self::Locked(_) => exit::LOCKED,
            Self::OverLimit { .. } => exit::OVER_LIMIT,
            Self::NotFound { .. } => exit::NOT_FOUND,
            // docs/contracts.md: 0 also when a stop signal cut a run short,
            // and when the question before removing was not answered yes.
            Self::Stopped { .. } | Self::NotConfirmed(_) => exit::OK,
        }
    }

    /// The error as one short line a person can act on: what failed, its
    /// last cause in a few words, and what to do where safeprune knows
    /// (docs/contracts.md, "stdout and stderr"). [`crate::output::Chain`]
    /// says every cause, for `-v` and the JSON error's `error`.
    #[must_use]
    pub fn brief(&self) -> String {
        use crate::output::{io_cause, io_words, root_cause};
        match self {
            Self::Runtime(e) => e.brief(),
            Self::File { path, source } => {
                let todo = match source.kind() {
                    std::io::ErrorKind::PermissionDenied => {
                        " (run as root, or name a path in the policy that this user may write)"
                    }
                    std::io::ErrorKind::ReadOnlyFilesystem => {
                        " (name a path on a writable file system in the policy)"
                    }
                    std::io::ErrorKind::NotFound => {
                        " (its directory does not exist: create it, or name another path in the policy)"
                    }
                    _ => "",
                };
                format!("cannot use {}: {}{todo}", path.display(), io_words(source))
            }
            // What failed already says why: nothing below it to add.
            Self::Policy(_)
            | Self::Usage(_)
            | Self::Locked(_)
            | Self::OverLimit { .. }
            | Self::RemovalsFailed { .. }
            | Self::NotFound { .. }
            | Self::NotReady(_)
            | Self::Stopped { .. }
            | Self::NotConfirmed(_) => crate::output::Chain(self).to_string(),
            Self::Daemon(_) | Self::Listen { .. } => {
                let cause = io_cause(self).map_or_else(|| root_cause(self).to_string(), io_words);
                format!("{self}: {cause}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Chain;

    #[test]
    fn a_chain_names_each_cause_once() {
        let error = AppError::File {
            path: "/var/lib/safeprune/last-run.json".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        let line = Chain(&error).to_string();
        assert_eq!(
            line,
            "cannot use /var/lib/safeprune/last-run.json: permission denied"
        );
    }

    #[test]
    fn exit_codes_are_the_documented_ones() {
        let codes = [
            exit::OK,
            exit::RUNTIME,
            exit::USAGE,
            exit::REMOVALS_FAILED,
            exit::LOCKED,
            exit::OVER_LIMIT,
            exit::NOT_FOUND,
        ];
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6]);
    }
}
