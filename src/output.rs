//! What safeprune prints outside its reports: text to stdout and stderr
//! without panicking when the reader went away (`safeprune explain web |
//! head -1` closes the pipe after one line, and `print!` would then panic;
//! what the reader wanted it has, and the exit code stays the command's
//! own), and an error with its chain of causes.

use std::error::Error;
use std::fmt;
use std::io::Write;

/// An error and its sources on one line, `what: why: why`, for logs.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// The columns of the terminal stdout is, for the tables to fit; `None`
/// when stdout is no terminal (piped, redirected), where tables keep their
/// full width for scripts and files. The terminal's own size
/// (`TIOCGWINSZ`), else `$COLUMNS`, else 80, as `ls` and docker read it.
#[must_use]
pub fn stdout_columns() -> Option<usize> {
    use std::io::IsTerminal;
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return None;
    }
    let from_terminal = terminal_columns(&stdout);
    let from_env = || {
        std::env::var("COLUMNS")
            .ok()
            .and_then(|columns| columns.trim().parse::<usize>().ok())
            .filter(|&columns| columns > 0)
    };
    Some(from_terminal.or_else(from_env).unwrap_or(80))
}

/// The columns of the terminal stderr is, if it is one and says.
#[must_use]
pub fn stderr_columns() -> Option<usize> {
    terminal_columns(std::io::stderr())
}

/// The columns the terminal behind `fd` says it has (TIOCGWINSZ).
fn terminal_columns(fd: impl std::os::fd::AsFd) -> Option<usize> {
    let size = rustix::termios::tcgetwinsize(fd).ok()?;
    (size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// Writes `text` to stdout as is, ignoring a closed pipe.
pub fn print_lossy(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// Writes `text` to stderr as is, ignoring a closed stderr.
pub fn eprint_lossy(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(text.as_bytes());
}

/// Writes one line to stderr, ignoring a closed stderr.
pub fn eprintln_lossy(line: &str) {
    eprint_lossy(&format!("{line}\n"));
}

/// The last of an error's causes (the error itself when it has none): the
/// words a short line keeps, where [`Chain`] says every step.
#[must_use]
pub fn root_cause<'a>(error: &'a (dyn Error + 'static)) -> &'a (dyn Error + 'static) {
    let mut last = error;
    while let Some(cause) = last.source() {
        last = cause;
    }
    last
}

/// The first I/O error among `error` and its causes: what the system said,
/// under a library's wrappers (`client error (Connect): …`).
#[must_use]
pub fn io_cause<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a std::io::Error> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        next = e.source();
    }
    None
}

/// An I/O error in a few lower-case words, without its number: `permission
/// denied`, `no such file or directory`, `read-only file system`.
#[must_use]
pub fn io_words(error: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    let words = match error.kind() {
        K::NotFound => "no such file or directory",
        K::PermissionDenied => "permission denied",
        K::ConnectionRefused => "connection refused",
        K::ReadOnlyFilesystem => "read-only file system",
        K::AlreadyExists => "it already exists",
        K::NotADirectory => "not a directory",
        K::IsADirectory => "is a directory",
        K::StorageFull => "no space left on device",
        K::AddrInUse => "address in use",
        _ => return error.to_string(),
    };
    words.to_owned()
}
