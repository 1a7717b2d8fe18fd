//! Reading a policy file: only a regular file, only so much of it, only
//! UTF-8. Whatever the path names (a FIFO, `/dev/zero`, a 50 MB file), the
//! read ends at once with an error that says what to do.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::PolicyError;

/// A policy is a few KB; anything over this is refused.
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// The text of the policy file at `path`.
///
/// The file is opened without blocking (a FIFO with no writer would
/// otherwise wait forever), then refused unless it is a regular file (a
/// symlink to one is fine) of at most [`MAX_POLICY_BYTES`] in UTF-8.
///
/// # Errors
/// It cannot be opened or read (`Read`), or is not what a policy file is
/// (`Invalid`, saying why).
pub fn read_policy_file(path: &Path) -> Result<String, PolicyError> {
    let read_error = |source: std::io::Error| PolicyError::Read {
        path: path.to_owned(),
        source,
    };
    let invalid = |message: String| PolicyError::Invalid {
        path: path.display().to_string(),
        message,
    };
    let fd = open(
        path,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY,
        Mode::empty(),
    )
    .map_err(|errno| read_error(errno.into()))?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(read_error)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(invalid(format!(
            "it is {what}, not a regular file: give the path of the policy's YAML file"
        )));
    }
    // Root acts on what the file says: only root may be able to change it.
    if nix::unistd::geteuid().is_root()
        && let Some(why) = super::trust::untrusted(path, &file, &meta)
    {
        return Err(PolicyError::Untrusted {
            path: path.to_owned(),
            why,
        });
    }
    let too_large = |size: String| {
        invalid(format!(
            "the file is {size} bytes, more than a policy's limit of {MAX_POLICY_BYTES} (1 MiB): \
             is this the right file?"
        ))
    };
    if usize::try_from(meta.len()).map_or(true, |n| n > MAX_POLICY_BYTES) {
        return Err(too_large(meta.len().to_string()));
    }
    // The file may grow after the check: read one byte past the limit at
    // most, to know.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_POLICY_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_POLICY_BYTES {
        return Err(too_large(format!("more than {MAX_POLICY_BYTES}")));
    }
    String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let bad = e.as_bytes()[good.len()];
        let line = good.split(|&b| b == b'\n').count();
        let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let column = String::from_utf8_lossy(&good[line_start..]).chars().count() + 1;
        invalid(format!(
            "byte 0x{bad:02x} is not UTF-8 at line {line} column {column}: save the policy as UTF-8"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(path: &Path) -> String {
        read_policy_file(path)
            .expect_err("should be refused")
            .to_string()
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        // No writer: a blocking open would wait forever.
        assert!(refused(&fifo).contains("it is a FIFO, not a regular file"));
        assert!(refused(Path::new("/dev/zero")).contains("a character device"));
        assert!(refused(dir.path()).contains("a directory"));
    }

    #[test]
    fn a_symlink_to_a_policy_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policy.yaml");
        std::fs::write(&file, "version: 1\n").unwrap();
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_policy_file(&link).unwrap(), "version: 1\n");
    }

    #[test]
    fn over_one_mib_is_refused_and_one_mib_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policy.yaml");
        std::fs::write(&file, "#".repeat(MAX_POLICY_BYTES)).unwrap();
        assert_eq!(read_policy_file(&file).unwrap().len(), MAX_POLICY_BYTES);
        std::fs::write(&file, "#".repeat(MAX_POLICY_BYTES + 1)).unwrap();
        let e = refused(&file);
        assert!(e.contains("the file is 1048577 bytes"), "{e}");
    }

    #[test]
    fn non_utf8_names_the_byte_and_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("policy.yaml");
        std::fs::write(&file, b"version: 1\nimages: \xc3\xa9\xff\n").unwrap();
        let e = refused(&file);
        assert!(
            e.ends_with("byte 0xff is not UTF-8 at line 2 column 10: save the policy as UTF-8"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_file_is_a_read_error_naming_it() {
        let e = read_policy_file(Path::new("/nonexistent/policy.yaml")).unwrap_err();
        assert!(matches!(e, PolicyError::Read { .. }));
        assert!(e.to_string().contains("/nonexistent/policy.yaml"));
    }
}
