//! The image rules over all images: `images.keep_recent`, `images.disk`
//! (by its watermarks or kubelet's), and where an image's last use comes
//! from.

use super::*;
use crate::inventory::{Image, Kind};
use crate::policy::Policy;

/// Images by id, each used `hours` ago (its creation), of `size` bytes.
fn sized(id: &str, tags: &[&str], hours: i64, size: u64) -> Image {
    Image {
        size: Some(size),
        ..image(id, tags, hours)
    }
}

/// A file system of 1,000 bytes, `used` of them in use.
fn fs(used: u64) -> crate::inventory::FsUsage {
    crate::inventory::FsUsage {
        path: "/var/lib/docker".into(),
        used_bytes: used,
        available_bytes: 1000 - used,
        stand_in: None,
    }
}

fn disk_policy(high: u8, low: u8, keep_recent: u32) -> Policy {
    let mut p = Policy::builtin();
    p.images.disk = Some(crate::policy::DiskWatermarks::percents(high, low));
    p.images.keep_recent = keep_recent;
    p
}

fn rules(p: &Plan, ids: &[&str]) -> Vec<Rule> {
    ids.iter().map(|id| find(p, Kind::Image, id).rule).collect()
}

#[test]
fn under_pressure_the_least_recently_used_go_first_until_low_percent() {
    // 90% full; each image frees 100 bytes (10 points): two of them bring
    // it to 70%. Least recently used first: d (96h), then a and b, tied at
    // 72h, by id.
    let inv = Inventory {
        images: vec![
            sized("sha256:a", &["a:1"], 72, 100),
            sized("sha256:b", &["b:1"], 72, 100),
            sized("sha256:c", &["c:1"], 48, 100),
            sized("sha256:d", &["d:1"], 96, 100),
        ],
        image_fs: Some(fs(900)),
        ..Inventory::default()
    };
    let p = plan(&inv, &disk_policy(85, 70, 0), now());
    assert_eq!(
        rules(&p, &["sha256:a", "sha256:b", "sha256:c", "sha256:d"]),
        [
            Rule::Eligible,
            Rule::LruNotNeeded,
            Rule::LruNotNeeded,
            Rule::Eligible
        ]
    );
    let kept = find(&p, Kind::Image, "sha256:c");
    assert_eq!(
        kept.detail,
        "removing the 2 less recently used images brings the image file system from 90% to 70%, \
         at or under low_percent 70; last used 2d ago (image created)"
    );
    // The unique size counts where the runtime gives it: d alone frees
    // enough.
    let mut inv = inv;
    inv.images[3].unique_size = Some(250);
    let p = plan(&inv, &disk_policy(85, 70, 0), now());
    assert_eq!(
        rules(&p, &["sha256:a", "sha256:b", "sha256:c", "sha256:d"]),
        [
            Rule::LruNotNeeded,
            Rule::LruNotNeeded,
            Rule::LruNotNeeded,
            Rule::Eligible
        ]
    );
    assert!(
        find(&p, Kind::Image, "sha256:c").detail.starts_with(
            "removing the less recently used image brings the image file system from 90% to 65%"
        ),
        "{}",
        find(&p, Kind::Image, "sha256:c").detail
    );
}

#[test]
fn at_or_under_the_high_watermark_or_unmeasured_nothing_goes_by_disk() {
    let images = vec![sized("sha256:a", &["a:1"], 72, 100)];
    for (image_fs, detail) in [
        (
            Some(fs(850)),
            "the image file system is 85% full, at or under high_percent 85",
        ),
        (
            None,
            "the image file system's usage is unknown: nothing is pruned by disk pressure",
        ),
    ] {
        let inv = Inventory {
            images: images.clone(),
            image_fs,
            ..Inventory::default()
        };
        let p = plan(&inv, &disk_policy(85, 70, 0), now());
        let d = find(&p, Kind::Image, "sha256:a");
        assert_eq!(
            (d.rule, d.detail.as_str()),
            (Rule::DiskBelowThreshold, detail)
        );
    }
    // Without images.disk, the age rules alone, whatever the disk.
    let inv = Inventory {
        images,
        image_fs: Some(fs(100)),
        ..Inventory::default()
    };
    assert_eq!(rule_of(&inv, Kind::Image, "sha256:a"), Rule::Eligible);
}

#[test]
fn a_file_system_that_only_stands_in_says_so_in_the_disk_rules_details() {
    // Docker's containerd image store, its root not found: DockerRootDir
    // measured in its place.
    let stand_in = |used| crate::inventory::FsUsage {
        stand_in: Some(
            "measured at DockerRootDir: containerd's image store could not be measured".into(),
        ),
        ..fs(used)
    };
    let images = vec![
        sized("sha256:a", &["a:1"], 72, 100),
        sized("sha256:b", &["b:1"], 48, 100),
    ];
    let detail = |image_fs, id| {
        let inv = Inventory {
            images: images.clone(),
            image_fs: Some(image_fs),
            ..Inventory::default()
        };
        find(&plan(&inv, &disk_policy(85, 80, 0), now()), Kind::Image, id)
            .detail
            .clone()
    };
    assert_eq!(
        detail(stand_in(800), "sha256:a"),
        "the image file system (measured at DockerRootDir: containerd's image store could not \
         be measured) is 80% full, at or under high_percent 85"
    );
    assert!(
        detail(stand_in(900), "sha256:b").starts_with(
            "removing the less recently used image brings the image file system (measured at \
             DockerRootDir: containerd's image store could not be measured) from 90% to 80%"
        ),
        "{}",
        detail(stand_in(900), "sha256:b")
    );
}

#[test]
fn keep_recent_keeps_the_newest_of_each_repository_counting_every_image() {
    // app: v3 is in use (and newest), v2, v1; a multi-tagged image is the
    // oldest of app and the only one of tools.
    let mut running = exited("web", 1);
    running.state = ContainerState::Running;
    running.image_id = "sha256:v3".into();
    running.image_ref = "app:3".into();
    running.created = hours_ago(30);
    let inv = Inventory {
        containers: vec![running],
        images: vec![
            image("sha256:v3", &["app:3"], 40),
            image("sha256:v2", &["docker.io/library/app:2"], 50),
            image("sha256:v1", &["app:1"], 60),
            image("sha256:multi", &["app:0", "tools:latest"], 70),
            image("sha256:dangling", &[], 80),
        ],
        ..Inventory::default()
    };
    let mut p = Policy::builtin();
    p.images.keep_recent = 2;
    let planned = plan(&inv, &p, now());
    assert_eq!(
        rules(
            &planned,
            &[
                "sha256:v3",
                "sha256:v2",
                "sha256:v1",
                "sha256:multi",
                "sha256:dangling"
            ]
        ),
        [
            Rule::InUse,
            Rule::KeepRecent,
            Rule::Eligible,
            Rule::KeepRecent,
            Rule::Eligible
        ]
    );
    assert_eq!(
        find(&planned, Kind::Image, "sha256:v2").detail,
        "one of the 2 most recently used images of docker.io/library/app; last used 2d2h ago (image created)"
    );
    assert!(
        find(&planned, Kind::Image, "sha256:multi")
            .detail
            .contains("docker.io/library/tools")
    );
}

#[test]
fn keep_patterns_and_pins_stay_first_and_keep_recent_comes_before_the_disk() {
    let mut pinned = image("sha256:pinned", &["app:4"], 10);
    pinned.pinned = true;
    let inv = Inventory {
        images: vec![
            pinned,
            image("sha256:pause", &["registry.k8s.io/pause:3.9"], 100),
            image("sha256:v3", &["app:3"], 40),
            image("sha256:v2", &["app:2"], 50),
        ],
        image_fs: Some(fs(990)),
        ..Inventory::default()
    };
    let planned = plan(&inv, &disk_policy(85, 0, 2), now());
    assert_eq!(
        rules(
            &planned,
            &["sha256:pinned", "sha256:pause", "sha256:v3", "sha256:v2"]
        ),
        [
            Rule::Pinned,
            Rule::KeepPattern,
            Rule::KeepRecent,
            Rule::Eligible
        ]
    );
}

#[test]
fn a_recheck_leaves_the_rules_over_all_images_to_the_plan() {
    // Re-checked alone, an image is the only one of its repository, and
    // the disk is not known: neither may keep it now.
    let inv = Inventory {
        images: vec![sized("sha256:a", &["a:1"], 72, 100)],
        ..Inventory::default()
    };
    let now_rules = recheck(
        Kind::Image,
        &["sha256:a"],
        &inv,
        (&disk_policy(85, 70, 3), &Plan::default()),
        now(),
    );
    assert_eq!(now_rules[0].as_ref().unwrap().rule, Rule::Eligible);
}

#[test]
fn the_last_use_names_where_it_comes_from() {
    let mut recorded = image("sha256:r", &["r:1"], 100);
    recorded.recorded_use = Some(crate::inventory::Use {
        at: hours_ago(30),
        source: crate::inventory::UseSource::ContainerStart,
    });
    let mut tagged = image("sha256:t", &["t:1"], 100);
    tagged.last_tagged = Some(hours_ago(2));
    let inv = Inventory {
        images: vec![recorded, tagged],
        ..Inventory::default()
    };
    let p = decide(&inv);
    assert_eq!(
        find(&p, Kind::Image, "sha256:r").detail,
        "unused, last used 1d6h ago (container start)"
    );
    assert_eq!(
        find(&p, Kind::Image, "sha256:t").detail,
        "last used 2h ago (pull, import or tag), younger than min_age 24h"
    );
}

#[test]
fn within_a_reviewed_plan_what_it_does_not_delete_is_kept_and_holds_its_image() {
    // Both containers and the image they were made from are eligible; the
    // reviewed plan deletes one container and the image. The other
    // container is kept, and so, now, is its image.
    let inv = Inventory {
        containers: vec![exited("a", 48), exited("b", 48)],
        images: vec![image("sha256:app", &["app:1"], 72)],
        ..Inventory::default()
    };
    let all = decide(&inv);
    assert_eq!(all.deletion_count(), 3);
    let within: Within = [
        (Kind::Container, "a".to_owned()),
        (Kind::Image, "sha256:app".to_owned()),
    ]
    .into();
    let p = plan_within(&inv, &Policy::builtin(), now(), &within);
    assert_eq!(find(&p, Kind::Container, "a").rule, Rule::Eligible);
    let b = find(&p, Kind::Container, "b");
    assert_eq!((b.rule, b.decision), (Rule::NotInPlan, Action::Keep));
    assert!(
        b.detail
            .starts_with("eligible now, but the reviewed plan does not delete it (exited"),
        "{}",
        b.detail
    );
    assert_eq!(find(&p, Kind::Image, "sha256:app").rule, Rule::InUse);
    // Nothing outside it is deleted, whatever the rules say.
    let p = plan_within(&inv, &Policy::builtin(), now(), &Within::new());
    assert_eq!(p.deletion_count(), 0);
}

/// `images.disk.from_kubelet` with kubelet's thresholds `high` and `low`
/// and `imageMinimumGCAge` of `floor_hours`.
fn kubelet_policy(high: u8, low: u8, floor_hours: i64) -> Policy {
    use crate::policy::{Age, DiskWatermarks, KubeletImageGc, Setting};
    let written = |value| Setting {
        value,
        written: true,
    };
    let mut p = Policy::builtin();
    p.images.disk = Some(DiskWatermarks::from_kubelet(KubeletImageGc {
        path: "/var/lib/kubelet/config.yaml".into(),
        high_threshold: written(high),
        low_threshold: written(low),
        minimum_gc_age: Setting {
            value: Age::hours(floor_hours),
            written: true,
        },
    }));
    p
}

#[test]
fn from_kubelet_prunes_below_kubelets_thresholds_and_never_under_its_minimum_age() {
    // kubelet 90/80 gives 85/75; 90% full, each image 100 bytes (10
    // points): two go.
    let inv = Inventory {
        images: vec![
            sized("sha256:a", &["a:1"], 1, 100),
            sized("sha256:b", &["b:1"], 72, 100),
            sized("sha256:c", &["c:1"], 48, 100),
            sized("sha256:d", &["d:1"], 96, 100),
        ],
        image_fs: Some(fs(900)),
        ..Inventory::default()
    };
    let mut policy = kubelet_policy(90, 80, 2);
    policy.images.min_age = crate::policy::Age::zero();
    let p = plan(&inv, &policy, now());
    assert_eq!(
        rules(&p, &["sha256:a", "sha256:b", "sha256:c", "sha256:d"]),
        [
            Rule::TooYoung,
            Rule::Eligible,
            Rule::LruNotNeeded,
            Rule::Eligible
        ]
    );
    assert_eq!(
        find(&p, Kind::Image, "sha256:a").detail,
        "last used 1h ago (image created), younger than kubelet's imageMinimumGCAge 2h"
    );
    assert!(
        find(&p, Kind::Image, "sha256:c")
            .detail
            .contains("at or under low_percent 75"),
    );
    // At 85% full, under kubelet's 90 but not over safeprune's 85: kept.
    let at_85 = Inventory {
        image_fs: Some(fs(850)),
        ..inv.clone()
    };
    let p = plan(&at_85, &policy, now());
    assert_eq!(
        find(&p, Kind::Image, "sha256:b").detail,
        "the image file system is 85% full, at or under high_percent 85"
    );
    // The stricter floor keeps, and names itself.
    policy.images.min_age = crate::policy::Age::hours(3);
    let p = plan(&inv, &policy, now());
    assert_eq!(
        find(&p, Kind::Image, "sha256:a").detail,
        "last used 1h ago (image created), younger than min_age 3h"
    );
}
