//! The images' usage history: the last use safeprune has seen of
//! each image, kept in `state_dir` between runs, because the engines keep
//! none (Docker records no last use at all; its event history is short;
//! kubelet forgets on every restart).
//!
//! The file is JSON, versioned and bounded: an image not seen on the node
//! for [`FORGET_AFTER`] is dropped, and at most [`MAX_ENTRIES`] are kept. A
//! file that is missing, unreadable, corrupt or of another version is
//! rebuilt with a warning, never a failure: the history only ever makes an
//! image look more recently used, so losing it costs precision, not
//! safety.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::inventory::{Inventory, Use, UseSource};

/// The file's name in `state_dir`.
pub const FILE: &str = "image-usage.json";
/// The lock every writer takes around its read and write of [`FILE`].
pub const LOCK_FILE: &str = "image-usage.lock";
/// The file format this safeprune writes and reads.
pub const VERSION: u32 = 1;
/// Entries far beyond any node's images.
pub const MAX_ENTRIES: usize = 100_000;
/// An image not seen on the node for this long is forgotten.
pub const FORGET_AFTER: Duration = Duration::days(30);
/// The largest file read: far over `MAX_ENTRIES` entries.
const MAX_FILE_BYTES: u64 = 64 << 20;

/// Every image's last recorded use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub version: u32,
    /// The engine's events have been read up to this time.
    pub events_until: Option<DateTime<Utc>>,
    /// By image id.
    pub images: BTreeMap<String, Entry>,
    /// When each image now on the node was first seen there, by image id:
    /// the age of an image the runtime gives no pull or tag time for (CRI;
    /// `docker load` on Docker's overlay2 store). Absent from files older
    /// safeprunes wrote: every image is then first seen now.
    #[serde(default)]
    pub first_seen: BTreeMap<String, DateTime<Utc>>,
}

/// One image's last recorded use, and when it was last seen on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub at: DateTime<Utc>,
    pub source: UseSource,
    pub seen: DateTime<Utc>,
}

/// How the history was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Read,
    /// No file yet: the first run on this node.
    Missing,
    /// The file could not be used, and why: it is rebuilt.
    Rebuilt(String),
}

impl History {
    fn empty() -> Self {
        Self {
            version: VERSION,
            ..Self::default()
        }
    }

    /// The history in `dir`, or an empty one, and how it was found.
    #[must_use]
    pub fn load(dir: &Path) -> (Self, Found) {
        let path = dir.join(FILE);
        let bytes = match crate::report::read_bounded(&path, MAX_FILE_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return (Self::empty(), Found::Missing);
            }
            Err(e) => {
                return (
                    Self::empty(),
                    Found::Rebuilt(format!("cannot read it: {e}")),
                );
            }
        };
        match serde_json::from_slice::<Self>(&bytes) {
            Ok(history) if history.version == VERSION => (history, Found::Read),
            Ok(history) => (
                Self::empty(),
                Found::Rebuilt(format!(
                    "it is version {}, this safeprune reads version {VERSION}",
                    history.version
                )),
            ),
            Err(e) => (
                Self::empty(),
                Found::Rebuilt(format!("it is not valid: {e}")),
            ),
        }
    }

    /// Records a use of `image`, if later than what is recorded.
    pub fn record(&mut self, image: &str, used: Use, now: DateTime<Utc>) {
        let entry = self.images.entry(image.to_owned()).or_insert(Entry {
            at: used.at,
            source: used.source,
            seen: now,
        });
        if used.at > entry.at {
            entry.at = used.at;
            entry.source = used.source;
        }
    }

    /// Marks the images of `inventory` as seen `now` (first seen, for those
    /// new to it), forgets those gone for [`FORGET_AFTER`], and keeps at
    /// most [`MAX_ENTRIES`] uses (the most recently seen).
    pub fn prune(&mut self, inventory: &Inventory, now: DateTime<Utc>) {
        let present: HashSet<&str> = inventory.images.iter().map(|i| i.id.as_str()).collect();
        // An image gone and back (pulled again) is first seen again.
        self.first_seen
            .retain(|id, _| present.contains(id.as_str()));
        for id in &present {
            self.first_seen.entry((*id).to_owned()).or_insert(now);
        }
        for (id, entry) in &mut self.images {
            if present.contains(id.as_str()) {
                entry.seen = now;
            }
        }
        self.images.retain(|_, e| now - e.seen < FORGET_AFTER);
        if self.images.len() > MAX_ENTRIES {
            // The most recently seen stay; a tie by id.
            let mut by_seen: Vec<(String, Entry)> =
                std::mem::take(&mut self.images).into_iter().collect();
            by_seen.sort_by(|a, b| b.1.seen.cmp(&a.1.seen).then_with(|| a.0.cmp(&b.0)));
            by_seen.truncate(MAX_ENTRIES);
            self.images = by_seen.into_iter().collect();
        }
    }

    /// Gives each image of `inventory` the use this history recorded, and
    /// its first sighting where the runtime gives no pull or tag time.
    pub fn apply(&self, inventory: &mut Inventory) {
        for image in &mut inventory.images {
            if image.arrival_unknown() {
                image.first_seen = self.first_seen.get(&image.id).copied();
            }
            if let Some(e) = self.images.get(&image.id) {
                let recorded = Use {
                    at: e.at,
                    source: e.source,
                };
                if image.recorded_use.is_none_or(|u| u.at < recorded.at) {
                    image.recorded_use = Some(recorded);
                }
            }
        }
    }

    /// Writes the history to `dir` atomically (the directory is made if
    /// missing).
    ///
    /// # Errors
    /// The directory cannot be made or written.
    pub fn save(&self, dir: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(FILE);
        let text = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        crate::report::write_atomically(&path, &text)?;
        Ok(path)
    }
}

/// Holds the history's lock in `dir` (made if missing) until dropped: the
/// daemon's follower, its cycles and a `run` beside them each read, change
/// and write the file under it, so none loses what another recorded.
/// Waits while another holds it (for a read and a write: milliseconds).
///
/// # Errors
/// The directory or the lock file cannot be made, or the lock not taken.
fn lock(dir: &Path) -> std::io::Result<std::fs::File> {
    std::fs::create_dir_all(dir)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    file.lock()?;
    Ok(file)
}

/// Reads the history in `dir` under its lock file, lets `change` change it,
/// and writes it back: what the daemon's follower, its cycles and a `run`
/// beside them each do. A file that cannot be used is rebuilt, and a lock
/// that cannot be taken is passed over, each with a warning: either costs
/// precision, never the run. Returns the history as changed, how the file
/// was found, and whether it was written.
pub fn update(
    dir: &Path,
    change: impl FnOnce(&mut History),
) -> (History, Found, std::io::Result<()>) {
    let lock = lock(dir);
    if let Err(e) = &lock {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot lock the image usage history");
    }
    let (mut history, found) = History::load(dir);
    if let Found::Rebuilt(why) = &found {
        tracing::warn!(path = %dir.join(FILE).display(), why, "the image usage history cannot be used: it is rebuilt");
    }
    change(&mut history);
    let written = history.save(dir).map(|_| ());
    (history, found, written)
}

/// Records `uses` (by image id) in the history in `dir`: what the daemon
/// follows between its cycles.
///
/// # Errors
/// The history cannot be written.
pub fn record_uses(dir: &Path, uses: &[(String, Use)], now: DateTime<Utc>) -> std::io::Result<()> {
    update(dir, |history| {
        for (image, used) in uses {
            history.record(image, *used, now);
        }
    })
    .2
}

/// The id of the image of `inventory` that `reference` names: its id (or
/// an id prefix of at least 12 digits), or a tag or digest reference in any
/// spelling.
#[must_use]
pub fn image_id_of<'a>(inventory: &'a Inventory, reference: &str) -> Option<&'a str> {
    let hex = reference.strip_prefix("sha256:").unwrap_or(reference);
    let forms = crate::inventory::reference_forms(reference);
    inventory
        .images
        .iter()
        .find(|i| {
            let id = i.id.strip_prefix("sha256:").unwrap_or(&i.id);
            (hex.len() >= 12 && id.starts_with(hex))
                || i.tags
                    .iter()
                    .chain(&i.digests)
                    .any(|r| forms.iter().any(|f| f == r))
        })
        .map(|i| i.id.as_str())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::inventory::Image;

    fn t(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 20, h, 0, 0).unwrap()
    }

    fn used(h: u32, source: UseSource) -> Use {
        Use { at: t(h), source }
    }

    fn node(ids: &[&str]) -> Inventory {
        Inventory {
            images: ids
                .iter()
                .map(|id| Image {
                    id: (*id).to_owned(),
                    ..Image::default()
                })
                .collect(),
            ..Inventory::default()
        }
    }

    #[test]
    fn the_latest_use_wins_and_reaches_the_inventory() {
        let mut h = History::empty();
        h.record("a", used(3, UseSource::ContainerStart), t(10));
        h.record("a", used(2, UseSource::ContainerCreate), t(10));
        h.record("b", used(1, UseSource::ContainerCreate), t(10));
        let mut inv = node(&["a", "c"]);
        h.apply(&mut inv);
        assert_eq!(
            inv.images[0].recorded_use,
            Some(used(3, UseSource::ContainerStart))
        );
        assert_eq!(inv.images[1].recorded_use, None);
    }

    #[test]
    fn it_survives_a_round_trip_and_rebuilds_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            History::load(dir.path()),
            (History::empty(), Found::Missing)
        );
        let mut h = History::empty();
        h.events_until = Some(t(9));
        h.record("a", used(3, UseSource::ContainerStart), t(10));
        let path = h.save(dir.path()).unwrap();
        assert_eq!(History::load(dir.path()), (h.clone(), Found::Read));
        for (text, why) in [
            (&b"{not json"[..], "it is not valid"),
            (
                br#"{"version": 2, "events_until": null, "images": {}}"#,
                "it is version 2",
            ),
            (b"\xff\xfe", "it is not valid"),
        ] {
            std::fs::write(&path, text).unwrap();
            let (loaded, found) = History::load(dir.path());
            assert_eq!(loaded, History::empty());
            assert!(
                matches!(&found, Found::Rebuilt(w) if w.starts_with(why)),
                "{found:?}"
            );
        }
    }

    #[test]
    fn a_reference_finds_its_image_in_any_spelling_or_by_id() {
        let mut inv = node(&["sha256:0123456789abcdef0123"]);
        inv.images[0].tags = vec!["docker.io/library/app:1".into()];
        let id = Some("sha256:0123456789abcdef0123");
        for reference in [
            "app:1",
            "library/app:1",
            "docker.io/library/app:1",
            "0123456789ab",
            "sha256:0123456789abcdef",
        ] {
            assert_eq!(image_id_of(&inv, reference), id, "{reference}");
        }
        for reference in ["app:2", "0123", "other/app:1"] {
            assert_eq!(image_id_of(&inv, reference), None, "{reference}");
        }
    }

    #[test]
    fn an_image_without_a_tag_time_is_as_old_as_its_first_sighting() {
        let mut h = History::empty();
        let mut inv = node(&["loaded", "pulled", "built"]);
        inv.images[0].tags = vec!["app:1".into()];
        inv.images[0].created = Some(t(0));
        inv.images[1].last_tagged = Some(t(1));
        inv.images[2].created = Some(t(2));
        h.prune(&inv, t(5));
        // Seen again later: the first sighting stays.
        h.prune(&inv, t(9));
        h.apply(&mut inv);
        assert_eq!(inv.images[0].first_seen, Some(t(5)));
        // The runtime's own time says more: no sighting is given.
        assert_eq!(inv.images[1].first_seen, None);
        // A dangling image built here is as old as its build.
        assert_eq!(inv.images[2].first_seen, None);
        // Gone, then back: first seen again.
        h.prune(&node(&["pulled"]), t(10));
        h.prune(&inv, t(11));
        let mut again = node(&["loaded"]);
        again.images[0].tags = vec!["app:1".into()];
        h.apply(&mut again);
        assert_eq!(again.images[0].first_seen, Some(t(11)));
    }

    #[test]
    fn a_file_without_first_sightings_is_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(FILE),
            br#"{"version": 1, "events_until": null, "images": {}}"#,
        )
        .unwrap();
        let (h, found) = History::load(dir.path());
        assert_eq!(found, Found::Read);
        assert!(h.first_seen.is_empty());
    }

    #[test]
    fn images_gone_for_a_while_are_forgotten() {
        let mut h = History::empty();
        h.record("here", used(1, UseSource::ContainerStart), t(1));
        h.record("gone", used(1, UseSource::ContainerStart), t(1));
        let inv = node(&["here"]);
        h.prune(&inv, t(1) + FORGET_AFTER - Duration::hours(1));
        assert_eq!(h.images.len(), 2, "not yet");
        h.prune(&inv, t(1) + FORGET_AFTER);
        assert_eq!(h.images.keys().collect::<Vec<_>>(), ["here"]);
    }
}
