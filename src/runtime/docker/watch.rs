//! Every container of the engine from the snapshot to the end of a run,
//! kept fresh from Docker's event history at a cost that does not grow
//! with the node.
//!
//! A re-check needs to know which containers use an image, a volume or a
//! network, and which pod sandboxes are up. Listing containers answers
//! that, but every `/containers/json` call costs dockerd time in
//! proportion to all its containers, whatever the filter (measured on
//! 20.10 at 2,000 containers: 88 ms unfiltered, 2.4 ms filtered by one id,
//! 10-12 ms by a label, an image or a volume, against 0.55 ms for an
//! inspect): one listing per batch made a run's cost grow with the square
//! of the node's size. So the adapter lists once, with the snapshot, and
//! then reads only what happened since: `GET /events?since=…&until=…`
//! answers from the last 256 events dockerd keeps in memory
//! (`daemon/events`, `eventsLimit`), and each container an event names is
//! inspected again. When the history may have overflowed (as many events
//! as it holds), or cannot be read, the adapter lists again: correct, only
//! slower.
//!
//! What the watch may miss errs on the side of keeping: a container it
//! still counts after it is gone holds what it used one batch longer.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use bollard::models::{EventMessage, EventMessageTypeEnum};

use crate::inventory::{Container, Image, PodSandbox, Volume, sandboxes_from_containers};

/// How many events dockerd keeps (`eventsLimit` in moby's
/// `daemon/events/events.go`, unchanged since 2015).
const EVENT_HISTORY: usize = 256;
/// An answer with this many events may have lost older ones: list again.
/// Below the history's size, so that events logged while dockerd answers
/// (after `until`, which it skips) cannot hide an overflow.
pub(super) const OVERFLOW_AT: usize = EVENT_HISTORY - 32;
/// How far before the last read the next one starts: dockerd stamps an
/// event a moment before it stores it (`Log`, then `PublishMessage` under
/// a lock), so one stamped just before a read may be stored just after.
/// Reading an event twice is harmless, but every event read costs dockerd
/// its encoding: while removals run at hundreds a second, an overlap of
/// 100 ms made each read carry dozens of old events.
pub(super) const OVERLAP: Duration = Duration::from_millis(10);

/// The watch, and the containers removed since it last synced: a
/// removal queues its container here rather than wait for the watch's
/// lock, which a re-check's read holds, and the next sync drops them
/// ([`Shared::forget_removed`]) without waiting for their events.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) watch: tokio::sync::Mutex<Watch>,
    removed: std::sync::Mutex<Vec<String>>,
}

impl Shared {
    /// Container `id` was removed by this connection.
    pub(super) fn removed(&self, id: &str) {
        self.removed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(id.to_owned());
    }

    /// Drops from `watch` the containers removed since its last sync.
    pub(super) fn forget_removed(&self, watch: &mut Watch) {
        let removed = std::mem::take(
            &mut *self
                .removed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for id in &removed {
            watch.forget(id);
        }
    }
}

/// The containers of the engine as last read; none before the first
/// listing.
#[derive(Default)]
pub(super) struct Watch {
    /// Each container by id, with the keys an image may know it by: its
    /// image id and every form of the reference it was made from.
    containers: HashMap<String, Entry>,
    /// The snapshot's volumes that no event has named since: a volume's
    /// name, labels and age do not change while it lives.
    volumes: HashMap<String, Volume>,
    /// The snapshot's images that no event has named since: an image's
    /// references and last tag time change only with an event about it.
    images: HashMap<String, Image>,
    /// Whether `images` is every image of the engine still: no image event
    /// since the snapshot. Only then does it know every child of an image.
    images_whole: bool,
    /// Whether an image of the snapshot was built on another: only then
    /// does a re-check look for children (elsewhere the engine's own
    /// refusal, 409, stands for a child made during the run).
    chains: bool,
    /// Events from here on are yet to be read; `None` until a listing.
    cursor: Option<SystemTime>,
}

/// What the events read since the last time ask of the watch.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Update {
    /// The history may have lost events: list every container again.
    Relist,
    /// These containers were destroyed; these changed and must be read
    /// again.
    Containers {
        gone: BTreeSet<String>,
        changed: BTreeSet<String>,
        /// Volumes an event named (made, removed, mounted): read them
        /// again before trusting what the snapshot said of them.
        volumes: BTreeSet<String>,
        /// Image ids an untag or delete event named; `None` after any
        /// other image event (a tag, pull, load, import or build may move
        /// a name off an image without an event about it): then no
        /// snapshot image is trusted.
        images: Option<BTreeSet<String>>,
    },
}

impl Watch {
    /// The containers of a listing that started at `taken`; `complete`
    /// when each exited one carries its exit time (the snapshot inspects
    /// them; a plain listing does not).
    pub(super) fn new(
        containers: impl IntoIterator<Item = Container>,
        taken: SystemTime,
        complete: bool,
    ) -> Self {
        Self {
            containers: containers
                .into_iter()
                .map(|c| (c.id.clone(), Entry::new(c, complete)))
                .collect(),
            volumes: HashMap::new(),
            images: HashMap::new(),
            images_whole: false,
            chains: false,
            cursor: Some(taken),
        }
    }

    /// The snapshot's volumes, read from the same `taken` on.
    pub(super) fn with_volumes(mut self, volumes: impl IntoIterator<Item = Volume>) -> Self {
        self.volumes = volumes.into_iter().map(|v| (v.name.clone(), v)).collect();
        self
    }

    /// The snapshot's images, read from the same `taken` on.
    pub(super) fn with_images(mut self, images: impl IntoIterator<Item = Image>) -> Self {
        self.images = images.into_iter().map(|i| (i.id.clone(), i)).collect();
        self.images_whole = true;
        self.chains = self.images.values().any(|i| i.parent.is_some());
        self
    }

    /// Whether an image of the snapshot was built on another.
    pub(super) fn has_chains(&self) -> bool {
        self.chains
    }

    /// The images built on one of `parents`, when the snapshot's images
    /// are still every image (no image event since); `None` otherwise.
    pub(super) fn children_of(&self, parents: &HashSet<&str>) -> Option<Vec<Image>> {
        if !self.images_whole {
            return None;
        }
        let mut children: Vec<Image> = self
            .images
            .values()
            .filter(|i| i.parent.as_deref().is_some_and(|p| parents.contains(p)))
            .cloned()
            .collect();
        children.sort_by(|a, b| a.id.cmp(&b.id));
        Some(children)
    }

    /// Image `id` as the snapshot read it, when no event has named it
    /// since.
    pub(super) fn unchanged_image(&self, id: &str) -> Option<&Image> {
        self.images.get(id)
    }

    /// Volume `name` as the snapshot read it, when no event has named it
    /// since.
    pub(super) fn unchanged_volume(&self, name: &str) -> Option<&Volume> {
        self.volumes.get(name)
    }

    /// Container `id` as last read, when that read was complete (an
    /// inspect, or the snapshot): no event since means no change since.
    pub(super) fn complete(&self, id: &str) -> Option<&Container> {
        self.containers
            .get(id)
            .filter(|e| e.complete)
            .map(|e| &e.container)
    }

    /// Where the next read of events starts; `None` when nothing was
    /// listed yet, so there is nothing to bring up to date.
    pub(super) fn since(&self) -> Option<SystemTime> {
        self.cursor
            .map(|cursor| cursor.checked_sub(OVERLAP).unwrap_or(cursor))
    }

    /// Reads no event stamped before `t` from now on (see
    /// `DockerRuntime::skip_events_until_now`).
    pub(super) fn skip_until(&mut self, t: SystemTime) {
        if self.cursor.is_some() {
            self.cursor = Some(t + OVERLAP);
        }
    }

    /// Applies what was read up to `until`: `gone` removed, `changed`
    /// replaced by what inspecting them again found (absent: gone too).
    pub(super) fn apply(
        &mut self,
        gone: &BTreeSet<String>,
        changed: impl IntoIterator<Item = (String, Option<Container>)>,
        volumes: &BTreeSet<String>,
        images: Option<&BTreeSet<String>>,
        until: SystemTime,
    ) {
        for name in volumes {
            self.volumes.remove(name);
        }
        if let Some(named) = images {
            for id in named {
                self.images_whole &= !self.images.contains_key(id);
                self.images.remove(id);
            }
        } else {
            self.images_whole = false;
            self.images.clear();
        }
        for id in gone {
            self.containers.remove(id);
        }
        for (id, now) in changed {
            match now {
                Some(c) => {
                    self.containers.insert(id, Entry::new(c, true));
                }
                None => {
                    self.containers.remove(&id);
                }
            }
        }
        self.cursor = Some(until);
    }

    /// Drops a container the engine has just removed (its `DELETE`
    /// answered, or said it was already gone): what it used is free now,
    /// whether or not its `destroy` event has been read yet. A `destroy`
    /// stamped just before a read's `until` but logged after the read took
    /// dockerd's history would otherwise be missed by every later read,
    /// and the container would keep its image, volumes and networks until
    /// the next listing. An event read later that names it finds it gone.
    pub(super) fn forget(&mut self, id: &str) {
        self.containers.remove(id);
    }

    /// Every container made from one of these images (`keys`: their ids,
    /// tags and digests), as the planner matches them.
    pub(super) fn users_of_images(&self, keys: &HashSet<&str>) -> Vec<Container> {
        self.users(|e| e.image_keys.iter().any(|k| keys.contains(k.as_str())))
    }

    /// Every container that mounts one of these volumes.
    pub(super) fn users_of_volumes(&self, names: &HashSet<&str>) -> Vec<Container> {
        self.users(|e| {
            e.container
                .volumes
                .iter()
                .any(|v| names.contains(v.as_str()))
        })
    }

    /// Every container attached to one of these networks (`keys`: their
    /// ids and names).
    pub(super) fn users_of_networks(&self, keys: &HashSet<&str>) -> Vec<Container> {
        self.users(|e| {
            e.container
                .networks
                .iter()
                .any(|n| keys.contains(n.as_str()))
        })
    }

    fn users(&self, uses: impl Fn(&Entry) -> bool) -> Vec<Container> {
        let mut found: Vec<Container> = self
            .containers
            .values()
            .filter(|e| uses(e))
            .map(|e| e.container.clone())
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found
    }

    /// The pod sandboxes of these pods (`sandbox_ids` and `pod_uids`: what
    /// the containers to re-check name): every sandbox the planner could
    /// match them with.
    pub(super) fn sandboxes_of(
        &self,
        sandbox_ids: &HashSet<&str>,
        pod_uids: &HashSet<&str>,
    ) -> Vec<PodSandbox> {
        let mut sandboxes: Vec<Container> = self
            .containers
            .values()
            .map(|e| &e.container)
            .filter(|c| {
                c.pod.as_ref().is_some_and(|p| {
                    p.is_sandbox
                        && (sandbox_ids.contains(c.id.as_str())
                            || p.pod_uid.as_deref().is_some_and(|u| pod_uids.contains(u)))
                })
            })
            .cloned()
            .collect();
        sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
        sandboxes_from_containers(&sandboxes)
    }
}

/// One container of the watch.
struct Entry {
    container: Container,
    /// The keys an image may know it by
    /// ([`crate::inventory::uses::container_image_keys`]).
    image_keys: Vec<String>,
    /// Whether it carries its exit time, if it has one.
    complete: bool,
}

impl Entry {
    fn new(container: Container, complete: bool) -> Self {
        // The one definition of how a container names the images it uses
        // (made from, mounted), as the planner matches them.
        let image_keys = crate::inventory::uses::container_image_keys(&container)
            .map(|(key, _)| key.to_owned())
            .collect();
        Self {
            container,
            image_keys,
            complete,
        }
    }
}

/// What `events` (every event since the last read, in the engine's order)
/// ask of the watch.
pub(super) fn update_from(events: &[EventMessage]) -> Update {
    if events.len() >= OVERFLOW_AT {
        return Update::Relist;
    }
    let mut gone = BTreeSet::new();
    let mut changed = BTreeSet::new();
    let mut volumes = BTreeSet::new();
    let mut images = Some(BTreeSet::new());
    for event in events {
        if event.typ == Some(EventMessageTypeEnum::IMAGE) {
            // Only an untag or a delete changes the image it names alone: a
            // tag (a build, a load, a pull) may take the name off another
            // image without an event about that one.
            let id = event.actor.as_ref().and_then(|a| a.id.as_deref());
            match (event.action.as_deref(), id) {
                (Some("untag" | "delete"), Some(id)) if id.starts_with("sha256:") => {
                    if let Some(named) = images.as_mut() {
                        named.insert(id.to_owned());
                    }
                }
                _ => images = None,
            }
            continue;
        }
        if event.typ == Some(EventMessageTypeEnum::VOLUME) {
            if let Some(name) = event.actor.as_ref().and_then(|a| a.id.as_deref()) {
                volumes.insert(name.to_owned());
            }
            continue;
        }
        if event.typ != Some(EventMessageTypeEnum::CONTAINER) {
            continue;
        }
        let Some(id) = event
            .actor
            .as_ref()
            .and_then(|a| a.id.as_deref())
            .filter(|id| !id.is_empty())
        else {
            continue;
        };
        // Ids are never reused: once destroyed, always gone.
        if event.action.as_deref() == Some("destroy") {
            changed.remove(id);
            gone.insert(id.to_owned());
        } else if !gone.contains(id) {
            changed.insert(id.to_owned());
        }
    }
    Update::Containers {
        gone,
        changed,
        volumes,
        images,
    }
}

/// A time as the events API takes it: seconds and nanoseconds since the
/// epoch.
pub(super) fn api_time(t: SystemTime) -> String {
    let since_epoch = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!(
        "{}.{:09}",
        since_epoch.as_secs(),
        since_epoch.subsec_nanos()
    )
}

#[cfg(test)]
mod tests {
    use bollard::models::EventActor;

    use super::*;

    fn event(typ: EventMessageTypeEnum, action: &str, id: &str) -> EventMessage {
        EventMessage {
            typ: Some(typ),
            action: Some(action.to_owned()),
            actor: Some(EventActor {
                id: Some(id.to_owned()),
                attributes: None,
            }),
            ..EventMessage::default()
        }
    }

    fn ids(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn container_events_name_what_to_read_again_and_destroy_wins() {
        use EventMessageTypeEnum::{CONTAINER, IMAGE, VOLUME};
        let events = [
            event(CONTAINER, "create", "new"),
            event(CONTAINER, "start", "new"),
            event(CONTAINER, "die", "sb"),
            event(CONTAINER, "create", "brief"),
            event(CONTAINER, "destroy", "brief"),
            event(CONTAINER, "destroy", "old"),
            event(IMAGE, "delete", "sha256:x"),
            event(VOLUME, "destroy", "v"),
            event(CONTAINER, "exec_start: sh", ""),
        ];
        assert_eq!(
            update_from(&events),
            Update::Containers {
                gone: ids(&["brief", "old"]),
                changed: ids(&["new", "sb"]),
                volumes: ids(&["v"]),
                images: Some(ids(&["sha256:x"])),
            }
        );
    }

    #[test]
    fn only_untag_and_delete_leave_the_other_snapshot_images_trusted() {
        use EventMessageTypeEnum::IMAGE;
        let named = [
            event(IMAGE, "delete", "sha256:a"),
            event(IMAGE, "untag", "sha256:b"),
        ];
        assert!(matches!(
            update_from(&named),
            Update::Containers { images: Some(i), .. } if i == ids(&["sha256:a", "sha256:b"])
        ));
        // Tagging image a may take its new name off another image, with no
        // event about that one; a pull names the reference it pulled.
        for moved in [
            event(IMAGE, "tag", "sha256:a"),
            event(IMAGE, "pull", "busybox:1.36"),
        ] {
            let events = [event(IMAGE, "untag", "sha256:b"), moved];
            assert!(matches!(
                update_from(&events),
                Update::Containers { images: None, .. }
            ));
        }

        let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 0);
        let image = |id: &str| Image {
            cri_pinned: false,
            parent: None,
            id: id.to_owned(),
            tags: Vec::new(),
            digests: Vec::new(),
            created: None,
            last_tagged: None,
            size: None,
            pinned: false,
            unique_size: None,
            recorded_use: None,
            first_seen: None,
            provenance: crate::inventory::provenance::Provenance::default(),
        };
        let mut w =
            Watch::new(Vec::new(), t, true).with_images([image("sha256:a"), image("sha256:c")]);
        w.apply(
            &BTreeSet::new(),
            [],
            &BTreeSet::new(),
            Some(&ids(&["sha256:a"])),
            t,
        );
        assert!(w.unchanged_image("sha256:a").is_none());
        assert!(w.unchanged_image("sha256:c").is_some());
        w.apply(&BTreeSet::new(), [], &BTreeSet::new(), None, t);
        assert!(w.unchanged_image("sha256:c").is_none());
    }

    #[test]
    fn a_history_that_may_have_overflowed_means_listing_again() {
        let events = vec![event(EventMessageTypeEnum::IMAGE, "untag", "x"); OVERFLOW_AT];
        assert_eq!(update_from(&events), Update::Relist);
        assert!(matches!(
            update_from(&events[1..]),
            Update::Containers { .. }
        ));
    }

    #[test]
    fn a_container_removed_frees_what_it_used_before_its_event_is_read() {
        let user = Container {
            id: "c1".to_owned(),
            image_ref: "app:1".to_owned(),
            volumes: vec!["data".to_owned()],
            networks: vec!["net".to_owned()],
            ..Container::default()
        };
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut w = Watch::new(vec![user], t, true);
        let image = HashSet::from(["app:1"]);
        let volume = HashSet::from(["data"]);
        let network = HashSet::from(["net"]);
        assert_eq!(w.users_of_images(&image).len(), 1);
        w.forget("c1");
        assert!(w.users_of_images(&image).is_empty());
        assert!(w.users_of_volumes(&volume).is_empty());
        assert!(w.users_of_networks(&network).is_empty());
        // The cursor stays: the events since are still to be read.
        assert_eq!(w.since(), Some(t - OVERLAP));
    }

    #[test]
    fn reads_overlap_and_times_carry_nanoseconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        assert_eq!(api_time(t), "1700000000.000000005");
        let w = Watch::new(Vec::new(), t, true);
        assert_eq!(w.since(), Some(t - OVERLAP));
        assert_eq!(Watch::default().since(), None);
    }

    proptest::proptest! {
        /// The containers and children a re-check of an image
        /// gathers from the watch are never fewer than the users the plan
        /// saw, and on them the rules keep the image as the plan did.
        #[test]
        fn a_recheck_never_sees_fewer_users_of_an_image_than_the_plan(
            inv in crate::plan::props::arb_inventory()
        ) {
            use crate::inventory::uses::{ImageUses, image_keys};
            let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 0);
            let watch = Watch::new(inv.containers.clone(), t, true)
                .with_images(inv.images.clone());
            let uses = ImageUses::new(&inv.containers, &inv.images);
            for (m, image) in inv.images.iter().enumerate() {
                // As `DockerRuntime::recheck` gathers them for a batch of one.
                let batch: HashSet<&str> = std::iter::once(image.id.as_str()).collect();
                let mut fresh_images = vec![image.clone()];
                if watch.has_chains() {
                    let children = watch.children_of(&batch).unwrap();
                    fresh_images.extend(children.into_iter().filter(|c| c.id != image.id));
                }
                let keys: HashSet<&str> = fresh_images.iter().flat_map(image_keys).collect();
                let containers = watch.users_of_images(&keys);
                let seen: BTreeSet<&str> = containers.iter().map(|c| c.id.as_str()).collect();
                for (n, _) in uses.containers_of(m) {
                    let id = uses.container(n).id.as_str();
                    proptest::prop_assert!(seen.contains(id), "{} misses user {id}", image.id);
                }
                let children: BTreeSet<&str> = fresh_images.iter().map(|i| i.id.as_str()).collect();
                for n in uses.children_of(m) {
                    let id = inv.images[n].id.as_str();
                    proptest::prop_assert!(children.contains(id), "{} misses child {id}", image.id);
                }
                let fresh = crate::inventory::Inventory {
                    containers,
                    images: fresh_images,
                    ..crate::inventory::Inventory::default()
                };
                let policy = crate::policy::Policy::builtin();
                let now = chrono::Utc::now();
                let again = crate::plan::recheck(crate::inventory::Kind::Image, &[image.id.as_str()], &fresh, (&policy, &crate::plan::Plan::default()), now);
                let whole = crate::plan::recheck(crate::inventory::Kind::Image, &[image.id.as_str()], &inv, (&policy, &crate::plan::Plan::default()), now);
                let rule = |d: &[Option<crate::plan::Decision>]| d[0].as_ref().map(|d| d.rule);
                if rule(&whole) == Some(crate::plan::Rule::InUse) {
                    proptest::prop_assert_eq!(rule(&again), Some(crate::plan::Rule::InUse));
                }
            }
        }
    }
}
