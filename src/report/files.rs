//! Report files: the JSON report written atomically, the audit log appended.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use chrono::{SecondsFormat, Utc};
use serde::Serialize;

use crate::execute::Outcome;

/// Writes `contents` to `path` so that readers see the old file or the new
/// one, never half of one: a temporary file beside it, synced, then renamed.
/// The temporary name does not end like the file (`node_exporter` reads only
/// `*.prom`, so it never sees half a textfile).
///
/// The file is readable by everyone (0644) whatever the umask: report and
/// metrics files are for other tools (`node_exporter` runs as its own user),
/// and the systemd units set `UMask=0077`.
///
/// # Errors
/// The directory is missing or not writable.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp.{}", std::process::id()));
    let tmp: PathBuf = dir.join(tmp_name);
    let result = (|| {
        let mut file = File::create(&tmp)?;
        // fchmod, unlike open's mode, ignores the umask.
        file.set_permissions(Permissions::from_mode(0o644))?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The whole of the file at `path`, refused when it holds more than `max`
/// bytes (read no further than one byte past): files safeprune wrote
/// itself, which a full or hostile disk must not turn into a huge read.
///
/// # Errors
/// The file cannot be read, or holds more than `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    File::open(path)?.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is larger than {max} bytes"),
        ));
    }
    Ok(bytes)
}

/// The audit log: one JSON line per removal attempt, appended and flushed at
/// once so a crash loses at most the attempt in flight.
#[derive(Debug)]
pub struct AuditLog {
    file: File,
    path: PathBuf,
}

#[derive(Serialize)]
struct AuditLine<'a> {
    time: String,
    node: &'a str,
    runtime: &'a str,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

impl AuditLog {
    /// Opens (creating) the log for appending.
    ///
    /// # Errors
    /// The file cannot be opened for appending.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    /// Where the log is.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one attempt.
    ///
    /// # Errors
    /// The write failed (disk full, say).
    pub fn record(&mut self, node: &str, runtime: &str, outcome: &Outcome) -> io::Result<()> {
        let line = AuditLine {
            time: Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
            node,
            runtime,
            outcome,
        };
        let mut text = serde_json::to_string(&line).map_err(io::Error::other)?;
        text.push('\n');
        // One write per line: O_APPEND keeps concurrent writers' lines whole.
        self.file.write_all(text.as_bytes())?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;
    use crate::execute::{Reason, RemovalResult};
    use crate::inventory::Kind;

    #[test]
    fn atomic_write_replaces_the_whole_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        write_atomically(&path, b"first, and longer").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "second");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(write_atomically(&dir.path().join("missing/r.json"), b"x").is_err());
    }

    #[test]
    fn audit_log_appends_one_json_line_per_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let outcome = Outcome {
            kind: Kind::Container,
            id: "abc".into(),
            name: "web".into(),
            refs: None,
            result: RemovalResult::Skipped,
            bytes: None,
            reason: Some(Reason::InUse),
            error: Some("in use".into()),
            kept_by: None,
        };
        for _ in 0..2 {
            let mut log = AuditLog::open(&path).unwrap();
            log.record("node1", "docker", &outcome).unwrap();
        }
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["result"], "skipped");
        assert_eq!(lines[1]["kind"], "container");
        assert_eq!(lines[1]["node"], "node1");
        assert_eq!(lines[1]["error"], "in use");
    }

    /// Set in the child process of the test below: where it writes.
    const UMASK_CHILD: &str = "SAFEPRUNE_TEST_UMASK_CHILD";

    /// `node_exporter` runs as its own user: under the units' `UMask=0077` the
    /// textfile must still come out 0644. The umask is the process's, so a
    /// child (this test binary again, under `sh -c 'umask 077'`) does the write.
    #[test]
    fn write_atomically_makes_the_file_world_readable_under_a_strict_umask() {
        if let Some(dir) = std::env::var_os(UMASK_CHILD) {
            let dir = Path::new(&dir);
            File::create(dir.join("control")).unwrap();
            write_atomically(&dir.join("safeprune.prom"), b"x 1\n").unwrap();
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("sh")
            .args(["-c", r#"umask 077 && exec "$0" "$@""#])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "report::files::tests::write_atomically_makes_the_file_world_readable_under_a_strict_umask",
                "--test-threads=1",
            ])
            .env(UMASK_CHILD, dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        let mode = |name: &str| {
            fs::metadata(dir.path().join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("control"), 0o600, "the child ran under umask 077");
        assert_eq!(mode("safeprune.prom"), 0o644);
    }
}
