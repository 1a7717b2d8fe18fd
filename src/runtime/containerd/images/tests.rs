//! The image records of one namespace as the inventory's images: names
//! folded by target, pins, sizes and what removing each frees.

use containerd_client::types::Descriptor;
use prost_types::Timestamp;

use super::*;
use crate::runtime::grpc::containerd::LABEL_GC_CONTENT;

const TARGET: &str = "sha256:aaaa";
const CONFIG: &str = "sha256:cccc";
const LAYER: &str = "sha256:1111";

fn record(name: &str, digest: &str, created: i64, updated: i64) -> ImageRecord {
    ImageRecord {
        name: name.to_owned(),
        target: Some(Descriptor {
            digest: digest.to_owned(),
            ..Descriptor::default()
        }),
        created_at: Some(Timestamp {
            seconds: created,
            nanos: 0,
        }),
        updated_at: Some(Timestamp {
            seconds: updated,
            nanos: 0,
        }),
        ..ImageRecord::default()
    }
}

fn blob(digest: &str, size: i64, children: &[(&str, &str)]) -> (String, Info) {
    let info = Info {
        digest: digest.to_owned(),
        size,
        labels: children
            .iter()
            .map(|(k, v)| (format!("{LABEL_GC_CONTENT}{k}"), (*v).to_owned()))
            .chain([(
                "containerd.io/gc.ref.snapshot.overlayfs".to_owned(),
                "sha256:snap".to_owned(),
            )])
            .collect(),
        ..Info::default()
    };
    (digest.to_owned(), info)
}

fn store() -> HashMap<String, Info> {
    HashMap::from([
        blob(TARGET, 400, &[("config", CONFIG), ("l.0", LAYER)]),
        blob(CONFIG, 250, &[]),
        blob(LAYER, 1_000_000, &[]),
    ])
}

fn namespace(images: Vec<ImageRecord>) -> NamespaceData {
    NamespaceData {
        namespace: "k8s.io".to_owned(),
        images,
        content: store(),
        ..NamespaceData::default()
    }
}

#[test]
fn every_name_of_one_target_is_one_image() {
    let ns = namespace(vec![
        record("docker.io/library/busybox:1.36", TARGET, 200, 300),
        // CRI's record of the image id (measured: it makes one per image).
        record("sha256:0079e1eb", TARGET, 100, 100),
        record("docker.io/library/busybox@sha256:aaaa", TARGET, 150, 150),
        record("docker.io/library/busybox:latest", TARGET, 210, 210),
        record("other:1", "sha256:bbbb", 50, 60),
    ]);
    let images = images_of(&ns, &Pins::default());
    assert_eq!(images.len(), 2);
    let busybox = &images[0];
    assert_eq!(busybox.id, "k8s.io/sha256:aaaa");
    assert_eq!(
        busybox.tags,
        [
            "docker.io/library/busybox:1.36",
            "docker.io/library/busybox:latest"
        ]
    );
    assert_eq!(busybox.digests, ["docker.io/library/busybox@sha256:aaaa"]);
    assert_eq!(busybox.created.unwrap().timestamp(), 100);
    assert_eq!(busybox.last_tagged.unwrap().timestamp(), 300);
    assert_eq!(busybox.size, Some(1_000_650));
    assert!(!busybox.pinned);
    assert_eq!(busybox.display_name(), "docker.io/library/busybox:1.36");
    // Its target is not in the store: size unknown, not zero.
    assert_eq!(images[1].id, "k8s.io/sha256:bbbb");
    assert_eq!(images[1].size, None);
    assert_eq!(images[1].digests, ["other@sha256:bbbb"]);
}

#[test]
fn an_image_known_only_by_its_id_is_dangling() {
    let images = images_of(
        &namespace(vec![record("sha256:0079", TARGET, 1, 1)]),
        &Pins::default(),
    );
    assert!(images[0].is_dangling());
    assert!(images[0].digests.is_empty());
}

#[test]
fn what_cri_reports_pinned_is_pinned_and_apart_from_labels() {
    // CRI names a pinned image by its id (CRI's record `sha256:<config>`)
    // and its tags; a labelled image CRI does not report (containerd
    // 1.6.20) is pinned for safeprune, but not for crictl.
    let mut labelled = record("registry.k8s.io/pause:3.6", TARGET, 1, 1);
    labelled
        .labels
        .insert(LABEL_PINNED.to_owned(), PINNED.to_owned());
    let ns = namespace(vec![
        labelled,
        record("sha256:c0f1", "sha256:b1", 1, 1),
        record("localhost/kubernetes/pause:0.1.0", "sha256:b1", 1, 1),
        record("other:2", "sha256:b3", 1, 1),
    ]);
    let pins = Pins {
        names: Vec::new(),
        cri: vec!["sha256:c0f1".to_owned()],
    };
    let pinned: Vec<(String, bool, bool)> = images_of(&ns, &pins)
        .into_iter()
        .map(|i| (i.id, i.pinned, i.cri_pinned))
        .collect();
    assert_eq!(
        pinned,
        [
            ("k8s.io/sha256:aaaa".to_owned(), true, false),
            ("k8s.io/sha256:b1".to_owned(), true, true),
            ("k8s.io/sha256:b3".to_owned(), false, false),
        ]
    );
}

#[test]
fn pinned_by_label_or_by_the_sandbox_image_in_any_spelling() {
    let mut labelled = record("registry.k8s.io/pause:3.9", TARGET, 1, 1);
    labelled
        .labels
        .insert(LABEL_PINNED.to_owned(), PINNED.to_owned());
    let mut wrong_value = record("a:1", "sha256:b1", 1, 1);
    wrong_value
        .labels
        .insert(LABEL_PINNED.to_owned(), "yes".to_owned());
    let ns = namespace(vec![
        labelled,
        wrong_value,
        record("docker.io/library/pause:1", "sha256:b2", 1, 1),
        record("other:2", "sha256:b3", 1, 1),
    ]);
    let pinned: Vec<(String, bool)> = images_of(
        &ns,
        &Pins {
            names: vec!["pause:1".to_owned()],
            cri: Vec::new(),
        },
    )
    .into_iter()
    .map(|i| (i.id, i.pinned))
    .collect();
    assert_eq!(
        pinned,
        [
            ("k8s.io/sha256:aaaa".to_owned(), true),
            ("k8s.io/sha256:b1".to_owned(), false),
            ("k8s.io/sha256:b2".to_owned(), true),
            ("k8s.io/sha256:b3".to_owned(), false),
        ]
    );
}

#[test]
fn records_without_a_target_or_a_name_are_skipped() {
    let mut no_target = record("x:1", TARGET, 1, 1);
    no_target.target = None;
    let ns = namespace(vec![
        no_target,
        record("", TARGET, 1, 1),
        record("y:1", "", 1, 1),
    ]);
    assert!(images_of(&ns, &Pins::default()).is_empty());
}

#[test]
fn records_of_a_target_are_sorted_by_name() {
    let images = vec![
        record("b:1", TARGET, 1, 1),
        record("a:1", TARGET, 1, 1),
        record("c:1", "sha256:other", 1, 1),
    ];
    let names: Vec<&str> = records_of(&images, TARGET)
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["a:1", "b:1"]);
    assert!(records_of(&images, "sha256:none").is_empty());
}

#[test]
fn content_is_counted_once_and_missing_children_cost_nothing() {
    let index = "sha256:index";
    let other_manifest = "sha256:m2";
    let mut content = store();
    content.extend([
        blob(
            index,
            1000,
            &[("m.0", TARGET), ("m.1", other_manifest), ("m.2", TARGET)],
        ),
        // A cycle must not loop.
        blob("sha256:loop", 7, &[("l.0", "sha256:loop")]),
    ]);
    assert_eq!(content_size(index, &content), Some(1_001_650));
    assert_eq!(content_size(TARGET, &content), Some(1_000_650));
    assert_eq!(content_size("sha256:loop", &content), Some(7));
    assert_eq!(content_size(other_manifest, &content), None);
    let mut negative = content.clone();
    negative.insert(CONFIG.to_owned(), blob(CONFIG, -1, &[]).1);
    assert_eq!(content_size(TARGET, &negative), Some(1_000_400));
}

#[test]
fn unique_sizes_leave_out_what_other_images_reach() {
    // Two images on one shared layer, each with its own manifest and
    // config; a third in another namespace shares the layer too; a fourth
    // whose target is not in the store.
    let (m1, m2, c1, c2, shared) = ("sha256:m1", "sha256:m2", "sha256:c1", "sha256:c2", LAYER);
    let mut content = HashMap::from([
        blob(m1, 100, &[("config", c1), ("l.0", shared)]),
        blob(c1, 10, &[]),
        blob(
            m2,
            200,
            &[("config", c2), ("l.0", shared), ("l.1", "sha256:own")],
        ),
        blob(c2, 20, &[]),
        blob("sha256:own", 5000, &[]),
    ]);
    content.extend(store());
    let k8s = NamespaceData {
        namespace: "k8s.io".to_owned(),
        content: content.clone(),
        ..NamespaceData::default()
    };
    let other = NamespaceData {
        namespace: "default".to_owned(),
        content: store(),
        ..NamespaceData::default()
    };
    let image = |id: &str| Image {
        id: id.to_owned(),
        ..Image::default()
    };
    let mut images = vec![
        image("k8s.io/sha256:m1"),
        image("k8s.io/sha256:m2"),
        image(&format!("default/{TARGET}")),
        image("k8s.io/sha256:absent"),
        image("elsewhere/sha256:m1"),
    ];
    with_unique_sizes(&mut images, &[k8s, other]);
    let unique: Vec<Option<u64>> = images.iter().map(|i| i.unique_size).collect();
    // The shared layer frees nothing; each keeps its manifest and config
    // (and m2 its own layer); TARGET's config is CONFIG, its own.
    assert_eq!(unique, [Some(110), Some(5220), Some(650), None, None]);
    // Alone, an image frees all its content.
    let mut alone = vec![image("k8s.io/sha256:m1")];
    let k8s = NamespaceData {
        namespace: "k8s.io".to_owned(),
        content: content.clone(),
        ..NamespaceData::default()
    };
    with_unique_sizes(&mut alone, &[k8s]);
    assert_eq!(alone[0].unique_size, content_size(m1, &content));
}
