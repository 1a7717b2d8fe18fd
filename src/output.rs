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
