//! Whether root may trust a policy file, as sshd's `StrictModes` asks of
//! `authorized_keys`: whoever can write the policy, or replace it by
//! writing a directory on the way to it, decides what root deletes.
//!
//! Refused, when safeprune runs as root: a policy file, or any directory its
//! path goes through (following every symlink on the way), that is owned by
//! another user than root, or writable by group or others. Two exceptions
//! keep the common layouts working without making them unsafe:
//!
//! - what lies on a read-only mount (a Kubernetes `ConfigMap` mounted
//!   `readOnly`, whose directory kubelet makes 0777) cannot be written,
//!   whatever its mode says;
//! - in a directory with the sticky bit (`/tmp`), only an entry's owner
//!   can rename or delete it, so a root-owned entry there stays root's.

use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::sys::statvfs::{FsFlags, fstatvfs, statvfs};

/// Group- or other-writable.
const SHARED_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;
/// As the kernel's limit on symlinks followed in one lookup.
const MAX_SYMLINKS: usize = 40;

/// Why root should not trust the policy at `path`, opened as `file`; `None`
/// when it may.
#[must_use]
pub fn untrusted(path: &Path, file: &File, meta: &Metadata) -> Option<String> {
    let read_only = fstatvfs(file).is_ok_and(|s| s.flags().contains(FsFlags::ST_RDONLY));
    if let Some(why) = fault(meta, read_only) {
        return Some(format!("the file {} {why}", path.display()));
    }
    let steps = match lookup_steps(path) {
        Ok(steps) => steps,
        Err(why) => return Some(why),
    };
    for (dir, entry) in steps {
        let Ok(dir_meta) = std::fs::metadata(&dir) else {
            return Some(format!("cannot inspect directory {}", dir.display()));
        };
        let read_only = statvfs(&dir).is_ok_and(|s| s.flags().contains(FsFlags::ST_RDONLY));
        // A sticky directory protects entries from all but their owner.
        let sticky_keeps_it = dir_meta.mode() & STICKY != 0
            && std::fs::symlink_metadata(dir.join(&entry)).is_ok_and(|m| m.uid() == 0);
        if let Some(why) = fault(&dir_meta, read_only || sticky_keeps_it) {
            return Some(format!("the directory {} {why}", dir.display()));
        }
    }
    None
}

/// What is wrong with one file or directory: an owner other than root, or
/// write access for group or others (ignored when `cannot_be_written`).
fn fault(meta: &Metadata, cannot_be_written: bool) -> Option<String> {
    let mode = meta.mode() & 0o7777;
    if meta.uid() != 0 {
        Some(format!(
            "is owned by uid {}, not root: `chown root` it, or keep the policy elsewhere",
            meta.uid()
        ))
    } else if mode & SHARED_WRITE != 0 && !cannot_be_written {
        let who = match mode & SHARED_WRITE {
            0o020 => "group",
            0o002 => "others",
            _ => "group and others",
        };
        Some(format!(
            "is writable by {who} (mode {mode:04o}): `chmod go-w` it, or keep the policy elsewhere"
        ))
    } else {
        None
    }
}

/// Every directory the lookup of `path` reads an entry from, with that
/// entry's name, following symlinks as the kernel does. A relative path is
/// looked up from the current directory, whose own ancestors count too.
fn lookup_steps(path: &Path) -> Result<Vec<(PathBuf, String)>, String> {
    let full = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map_err(|e| format!("cannot resolve the current directory: {e}"))?
            .join(path)
    };
    // Names still to look up, the next last.
    let mut queue: Vec<String> = names(&full).rev().collect();
    let mut steps = Vec::new();
    let mut dir = PathBuf::from("/");
    let mut followed = 0;
    while let Some(name) = queue.pop() {
        if name == ".." {
            dir.pop();
            continue;
        }
        steps.push((dir.clone(), name.clone()));
        let next = dir.join(&name);
        let meta = std::fs::symlink_metadata(&next)
            .map_err(|e| format!("cannot inspect {}: {e}", next.display()))?;
        if meta.file_type().is_symlink() {
            followed += 1;
            if followed > MAX_SYMLINKS {
                return Err(format!(
                    "too many symlinks on the way to {}",
                    path.display()
                ));
            }
            let target = std::fs::read_link(&next)
                .map_err(|e| format!("cannot read the symlink {}: {e}", next.display()))?;
            if target.is_absolute() {
                dir = PathBuf::from("/");
            }
            queue.extend(names(&target).rev());
        } else if !queue.is_empty() {
            dir = next;
        }
    }
    Ok(steps)
}

/// The names a lookup of `path` steps through: each component, `..` too.
fn names(path: &Path) -> impl DoubleEndedIterator<Item = String> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
        Component::ParentDir => Some("..".to_owned()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    /// A root-owned 0755 directory outside /tmp's reach, for a tree whose
    /// modes the test sets.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    fn verdict(path: &Path) -> Option<String> {
        let file = File::open(path).unwrap();
        let meta = file.metadata().unwrap();
        untrusted(path, &file, &meta)
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_root_owned_policy_in_root_owned_directories_is_trusted() {
        assert_eq!(
            nix::unistd::geteuid().as_raw(),
            0,
            "these tests run as root"
        );
        let t = tree();
        let file = t.path().join("policy.yaml");
        std::fs::write(&file, "version: 1\n").unwrap();
        chmod(&file, 0o644);
        // Through the temporary directory (/tmp, 1777) too: its entry is
        // root's, so only root renames it.
        assert_eq!(verdict(&file), None);
    }

    #[test]
    fn a_policy_others_can_write_is_refused() {
        let t = tree();
        let file = t.path().join("policy.yaml");
        std::fs::write(&file, "version: 1\n").unwrap();
        for (mode, who) in [
            (0o664, "group"),
            (0o646, "others"),
            (0o666, "group and others"),
        ] {
            chmod(&file, mode);
            let why = verdict(&file).expect("refused");
            assert_eq!(
                why,
                format!(
                    "the file {} is writable by {who} (mode {mode:04o}): `chmod go-w` it, or keep the policy elsewhere",
                    file.display()
                )
            );
        }
    }

    #[test]
    fn a_policy_owned_by_another_user_is_refused() {
        let t = tree();
        let file = t.path().join("policy.yaml");
        std::fs::write(&file, "version: 1\n").unwrap();
        std::os::unix::fs::chown(&file, Some(1000), Some(1000)).unwrap();
        let why = verdict(&file).expect("refused");
        assert!(why.contains("is owned by uid 1000, not root"), "{why}");
    }

    #[test]
    fn a_writable_directory_on_the_way_is_refused_even_through_a_symlink() {
        let t = tree();
        let shared = t.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        let real = shared.join("policy.yaml");
        std::fs::write(&real, "version: 1\n").unwrap();
        let etc = t.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        let link = etc.join("policy.yaml");
        symlink(&real, &link).unwrap();
        chmod(&shared, 0o755);
        assert_eq!(verdict(&link), None);
        // Whoever writes `shared` can swap the file the link leads to.
        chmod(&shared, 0o775);
        let why = verdict(&link).expect("refused");
        assert!(
            why.starts_with(&format!(
                "the directory {} is writable by group",
                shared.display()
            )),
            "{why}"
        );
        // Whoever writes `etc` can swap the link itself.
        chmod(&shared, 0o755);
        chmod(&etc, 0o757);
        let why = verdict(&link).expect("refused");
        assert!(
            why.starts_with(&format!(
                "the directory {} is writable by others",
                etc.display()
            )),
            "{why}"
        );
    }

    #[test]
    fn a_sticky_directory_protects_only_roots_entries() {
        let t = tree();
        let sticky = t.path().join("sticky");
        std::fs::create_dir(&sticky).unwrap();
        chmod(&sticky, 0o1777);
        let file = sticky.join("policy.yaml");
        std::fs::write(&file, "version: 1\n").unwrap();
        assert_eq!(verdict(&file), None);
        // Not sticky: anyone could replace it.
        chmod(&sticky, 0o777);
        assert!(verdict(&file).is_some());
    }
}
