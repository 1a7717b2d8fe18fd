//! How full a file system is, as `df` counts it: the image file system
//! of `images.disk`.

/// How full the file system holding `path` is, as `df` counts it; `None`
/// when `path` cannot be measured from here (safeprune in a pod that does
/// not mount the engine's directory).
#[must_use]
pub fn fs_usage(path: &std::path::Path) -> Option<crate::inventory::FsUsage> {
    match nix::sys::statvfs::statvfs(path) {
        Ok(s) => {
            let usage = usage_of(
                path,
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.fragment_size(),
            );
            if usage.is_none() {
                tracing::warn!(
                    path = %path.display(),
                    blocks = s.blocks(),
                    free = s.blocks_free(),
                    available = s.blocks_available(),
                    "the image file system's reading makes no sense: its usage is unknown, and nothing is pruned by disk pressure"
                );
            }
            usage
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot measure the image file system");
            None
        }
    }
}

/// A `statvfs(2)` reading as usage, `None` when it makes no sense: more
/// blocks free (or available to users) than the file system has, or no
/// blocks at all. Unchecked, `blocks - free` wrapped to about 100% in a
/// release build, and `images.disk` would have pruned every eligible
/// image.
fn usage_of(
    path: &std::path::Path,
    blocks: u64,
    free: u64,
    available: u64,
    block_size: u64,
) -> Option<crate::inventory::FsUsage> {
    if blocks == 0 || block_size == 0 || free > blocks || available > free {
        return None;
    }
    Some(crate::inventory::FsUsage {
        path: path.display().to_string(),
        used_bytes: (blocks - free).checked_mul(block_size)?,
        available_bytes: available.checked_mul(block_size)?,
        stand_in: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_that_makes_no_sense_is_unknown_not_full() {
        let path = std::path::Path::new("/var/lib/docker");
        let usage = usage_of(path, 100, 40, 30, 4096).unwrap();
        assert_eq!(usage.used_bytes, 60 * 4096);
        assert_eq!(usage.available_bytes, 30 * 4096);
        // More free than there is: the subtraction wrapped before.
        assert_eq!(usage_of(path, 100, 101, 30, 4096), None);
        assert_eq!(usage_of(path, 100, 40, 41, 4096), None);
        assert_eq!(usage_of(path, 0, 0, 0, 4096), None);
        assert_eq!(usage_of(path, 100, 40, 30, 0), None);
        assert_eq!(usage_of(path, u64::MAX, 0, 0, 4096), None);
    }
}
