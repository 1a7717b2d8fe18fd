//! `check` beyond the policy: whether safeprune can work on this node with
//! it (docs/contracts.md, "check"). One line each on stderr, `ok` or what
//! failed and what to do: the engine it would use, the directories it
//! writes in, and (in `app.rs`) the pressure `safety.pace` reads.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::AppError;
use crate::inventory::RuntimeKind;
use crate::output::{eprintln_lossy, io_words};
use crate::policy::{KeepUnpullable, Policy, RuntimeChoice};
use crate::runtime::{Chosen, Engine, Runtime};

/// Says one check's line on stderr (an `ok` only when not quiet), and
/// whether it held.
fn say(quiet: bool, what: &str, result: Result<String, String>) -> bool {
    match result {
        Ok(ok) => {
            if !quiet {
                eprintln_lossy(&format!("safeprune: {what}: ok: {ok}"));
            }
            true
        }
        Err(why) => {
            eprintln_lossy(&format!("safeprune: {what}: {why}"));
            false
        }
    }
}

/// Checks the engine and the directories of `policy`, after `pace_ok`
/// (the pace line, already said); `Err` names what failed.
///
/// # Errors
/// [`AppError::NotReady`] when any check failed.
pub(super) async fn node(policy: &Policy, quiet: bool, pace_ok: bool) -> Result<(), AppError> {
    let mut failed = Vec::new();
    if !pace_ok {
        failed.push("safety.pace");
    }
    match engine(policy).await {
        Ok((said, runtime)) => {
            say(quiet, "engine", Ok(said));
            say(
                quiet,
                "images.keep_unpullable",
                Ok(keep_unpullable(policy, &runtime).await),
            );
        }
        Err(why) => {
            say(quiet, "engine", Err(why));
            failed.push("engine");
        }
    }
    let mut checks = vec![("state_dir", directory(&policy.state_dir, true))];
    for (key, path) in [
        ("report.json_path", &policy.report.json_path),
        ("report.metrics_textfile", &policy.report.metrics_textfile),
    ] {
        if !path.is_empty() {
            checks.push((key, directory(&parent(Path::new(path)), false)));
        }
    }
    if !policy.report.audit_log.is_empty() {
        checks.push((
            "report.audit_log",
            file(Path::new(&policy.report.audit_log)),
        ));
    }
    checks.push(("lock_file", file(&policy.lock_file)));
    for (key, result) in checks {
        if !say(quiet, key, result) {
            failed.push(key);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(AppError::NotReady(failed.join(", ")))
    }
}

/// The engine the policy names (with `auto`, the first that answers), as
/// a run would reach it: what answered, and the runtime; or why none did
/// and what to do.
async fn engine(policy: &Policy) -> Result<(String, Runtime), String> {
    let Chosen { runtime, .. } = Runtime::connect(&policy.runtime)
        .await
        .map_err(|e| e.brief())?;
    let endpoint = match runtime.kind() {
        RuntimeKind::Docker => &policy.runtime.docker.endpoint,
        RuntimeKind::Containerd => &policy.runtime.containerd.endpoint,
        RuntimeKind::Cri => &policy.runtime.cri.endpoint,
    };
    let auto = if policy.runtime.kind == RuntimeChoice::Auto {
        " (runtime.kind auto: the first that answered)"
    } else {
        ""
    };
    Ok((
        format!("{} at {endpoint}{auto}", runtime.describe().await),
        runtime,
    ))
}

/// What `images.keep_unpullable` does on this node, and what says which
/// images no registry can give back; or, where the runtime cannot tell,
/// that every named image counts as one that can come back. Never a
/// failure: an unknown fact prunes as before.
async fn keep_unpullable(policy: &Policy, runtime: &Runtime) -> String {
    let setting = policy.images.keep_unpullable;
    if setting == KeepUnpullable::Never {
        return "false: an image no registry can give back is pruned by the other rules".to_owned();
    }
    let node = match runtime.kind() {
        RuntimeKind::Containerd | RuntimeKind::Cri => {
            Some(format!("a CRI runtime ({})", runtime.kind()))
        }
        // On Docker, whether kubelet's containers are there: an inventory.
        RuntimeKind::Docker if setting == KeepUnpullable::Auto => runtime
            .inventory()
            .await
            .ok()
            .and_then(|inventory| inventory.kubernetes_node()),
        RuntimeKind::Docker => None,
    };
    let on = match (setting, node) {
        (KeepUnpullable::Auto, None) => {
            return format!(
                "auto, off here: not a Kubernetes node (no CRI runtime, no kubelet's containers seen on {})",
                runtime.kind()
            );
        }
        (KeepUnpullable::Auto, Some(why)) => format!("auto, on here: {why}"),
        _ => "true".to_owned(),
    };
    match runtime.pull_evidence().await {
        Ok(evidence) => format!("{on}; {evidence} say which images no registry can give back"),
        Err(why) => format!(
            "{on}; but it cannot tell which images no registry can give back ({why}): every named image counts as one that can come back"
        ),
    }
}

/// The directory a file at `path` lies in.
fn parent(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned()
}

/// Whether safeprune can make files in `dir`, as a run does (a report is
/// written beside its path, then renamed): a file is made there and
/// removed. A missing `dir` is made (and removed again) when `creatable`,
/// since a run makes it (`state_dir`); else it must exist.
fn directory(dir: &Path, creatable: bool) -> Result<String, String> {
    let fail = |doing: &str, e: &io::Error| {
        format!(
            "cannot {doing} {}: {} ({})",
            dir.display(),
            io_words(e),
            what_to_do(e)
        )
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {
            probe(dir).map_err(|e| fail("write in", &e))?;
            Ok(format!("{} is writable", dir.display()))
        }
        Ok(_) => Err(format!(
            "{} is not a directory (name a directory in the policy)",
            dir.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound && creatable => {
            let made = create(dir).map_err(|e| fail("create", &e))?;
            let probed = probe(dir);
            unmake(&made);
            probed.map_err(|e| fail("write in", &e))?;
            Ok(format!("{} can be created", dir.display()))
        }
        Err(e) => Err(fail("write in", &e)),
    }
}

/// A file safeprune opens where it is (`lock_file`, `report.audit_log`):
/// opened for writing (never truncated, nothing written) when it exists,
/// else its directory must take a new file.
fn file(path: &Path) -> Result<String, String> {
    match OpenOptions::new().append(true).open(path) {
        Ok(_) => Ok(format!("{} can be opened for writing", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            directory(&parent(path), false).map(|_| format!("{} can be created", path.display()))
        }
        Err(e) => Err(format!(
            "cannot open {}: {} ({})",
            path.display(),
            io_words(&e),
            what_to_do(&e)
        )),
    }
}

/// Makes a file in `dir` and removes it.
fn probe(dir: &Path) -> io::Result<()> {
    let path = dir.join(format!(".safeprune-check.{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)
}

/// Makes `dir` and the directories missing above it; the ones made, the
/// deepest first. On an error, what it made is removed again.
fn create(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(path) = at.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        missing.push(path.to_owned());
        at = path.parent();
    }
    let mut made = Vec::new();
    for path in missing.iter().rev() {
        if let Err(e) = std::fs::create_dir(path) {
            made.reverse();
            unmake(&made);
            return Err(e);
        }
        made.push(path.clone());
    }
    made.reverse();
    Ok(made)
}

/// Removes the directories `create` made, the deepest first.
fn unmake(made: &[PathBuf]) {
    for path in made {
        let _ = std::fs::remove_dir(path);
    }
}

/// What to do about a path that cannot be written.
fn what_to_do(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::PermissionDenied => {
            "run as root, or name a path in the policy that this user may write"
        }
        io::ErrorKind::ReadOnlyFilesystem => "name a path on a writable file system in the policy",
        io::ErrorKind::NotFound => "create the directory, or name another path in the policy",
        _ => "name another path in the policy",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_made_probed_and_removed_again() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b/state");
        let said = directory(&dir, true).unwrap();
        assert!(said.ends_with("can be created"), "{said}");
        assert!(!root.path().join("a").exists(), "nothing left behind");
        // Where a run does not make it (a report's directory), it must exist.
        let said = directory(&dir, false).unwrap_err();
        assert!(said.contains("no such file or directory"), "{said}");
        assert!(said.contains("create the directory"), "{said}");
    }

    #[test]
    fn a_directory_that_cannot_be_made_fails_and_says_what_to_do() {
        let said = directory(Path::new("/proc/safeprune-check/state"), true).unwrap_err();
        assert!(
            said.starts_with("cannot create /proc/safeprune-check/state: "),
            "{said}"
        );
        let root = tempfile::tempdir().unwrap();
        let taken = root.path().join("file");
        std::fs::write(&taken, "").unwrap();
        let said = directory(&taken, true).unwrap_err();
        assert!(said.contains("is not a directory"), "{said}");
        assert!(std::fs::read(&taken).unwrap().is_empty());
    }

    #[test]
    fn an_existing_file_is_opened_not_truncated() {
        let root = tempfile::tempdir().unwrap();
        let lock = root.path().join("safeprune.lock");
        std::fs::write(&lock, "held").unwrap();
        assert!(file(&lock).unwrap().ends_with("can be opened for writing"));
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "held");
        let new = root.path().join("audit.jsonl");
        assert!(file(&new).unwrap().ends_with("can be created"));
        assert!(!new.exists(), "nothing left behind");
        assert!(std::fs::read_dir(root.path()).unwrap().count() == 1);
    }
}
