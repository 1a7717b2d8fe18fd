//! The containerd commands' models.

use super::*;
use crate::plan::prune_model::CRI_KIND;

fn cri_node() -> Inventory {
    let cri = |id: &str, kind: &str, state, image: &str| {
        let mut c = container(id, state, image, &[], &[]);
        c.labels.insert(CRI_KIND.into(), kind.into());
        c.image_ref = format!(
            "docker.io/library/{}:1",
            image.trim_start_matches("k8s.io/sha256:")
        );
        c
    };
    let image = |id: &str, pinned| Image {
        id: id.into(),
        tags: vec![format!(
            "docker.io/library/{}:1",
            id.trim_start_matches("k8s.io/sha256:")
        )],
        pinned,
        ..Image::default()
    };
    Inventory {
        runtime: "containerd".into(),
        containers: vec![
            cri(
                "k8s.io/app",
                "container",
                ContainerState::Running,
                "k8s.io/sha256:app",
            ),
            cri(
                "k8s.io/init",
                "container",
                ContainerState::Exited,
                "k8s.io/sha256:init",
            ),
            cri(
                "k8s.io/pod",
                "sandbox",
                ContainerState::Running,
                "k8s.io/sha256:pause",
            ),
            cri(
                "k8s.io/gone-pod",
                "sandbox",
                ContainerState::Exited,
                "k8s.io/sha256:pause",
            ),
            container(
                "k8s.io/native",
                ContainerState::Exited,
                "k8s.io/sha256:tool",
                &[],
                &[],
            ),
            container(
                "default/other",
                ContainerState::Exited,
                "default/sha256:x",
                &[],
                &[],
            ),
        ],
        images: vec![
            image("k8s.io/sha256:app", false),
            image("k8s.io/sha256:init", false),
            image("k8s.io/sha256:pause", true),
            image("k8s.io/sha256:tool", false),
            image("k8s.io/sha256:unused", false),
            image("default/sha256:x", false),
        ],
        ..Inventory::default()
    }
}

#[test]
fn on_a_cri_node_crictl_prune_sees_every_image_and_container() {
    // CRI-O: bare ids, no namespace, no CRI kind label.
    let node = Inventory {
        runtime: crate::inventory::RuntimeKind::Cri.as_str().into(),
        containers: vec![crate::inventory::Container {
            id: "c1".into(),
            state: crate::inventory::ContainerState::Exited,
            image_id: "aaaa".into(),
            image_mounts: vec!["vvvv".into()],
            layer: None,
            ..crate::inventory::Container::default()
        }],
        images: vec![
            Image {
                id: "aaaa".into(),
                ..Image::default()
            },
            Image {
                id: "pppp".into(),
                pinned: true,
                cri_pinned: true,
                ..Image::default()
            },
            Image {
                id: "vvvv".into(),
                ..Image::default()
            },
            Image {
                id: "uuuu".into(),
                ..Image::default()
            },
        ],
        ..Inventory::default()
    };
    let v = crictl_rmi_prune(&node);
    let mut want = ids(Kind::Image, &["uuuu", "vvvv"]);
    want.sort();
    assert_eq!(removed(&v), want);
    assert!(
        v[&(Kind::Image, "aaaa".into())]
            .why
            .starts_with("a CRI container was made from it")
    );
}

#[test]
fn crictl_prune_spares_what_cri_pins_and_the_images_of_cri_containers_of_any_state() {
    // The pause image is pinned by its configured name only, as on
    // containerd 1.6.20, whose CRI reports nothing pinned: crictl
    // removes it. So too an image mounted as a volume.
    let mut node = cri_node();
    node.images.push(Image {
        id: "k8s.io/sha256:cri-pinned".into(),
        pinned: true,
        cri_pinned: true,
        ..Image::default()
    });
    node.images.push(Image {
        id: "k8s.io/sha256:volume".into(),
        ..Image::default()
    });
    node.containers[0].image_mounts = vec!["k8s.io/sha256:volume".into()];
    let v = crictl_rmi_prune(&node);
    // The native container's image goes: crictl does not see it.
    let mut want = ids(
        Kind::Image,
        &[
            "k8s.io/sha256:pause",
            "k8s.io/sha256:tool",
            "k8s.io/sha256:unused",
            "k8s.io/sha256:volume",
        ],
    );
    want.sort();
    assert_eq!(removed(&v), want);
    assert!(
        v[&(Kind::Image, "k8s.io/sha256:init".into())]
            .why
            .contains("init, exited")
    );
    assert_eq!(
        v[&(Kind::Image, "k8s.io/sha256:pause".into())].why,
        "no CRI container was made from it, and CRI does not report it pinned"
    );
    assert!(
        v[&(Kind::Image, "k8s.io/sha256:cri-pinned".into())]
            .why
            .starts_with("CRI reports it pinned")
    );
}

/// A CRI node behind `runtime_name` (`cri-o`, `containerd`): a running
/// container `web` mounts image `mounted`, an exited one `was-mounted`.
fn cri_node_with_mounts(runtime_name: &str) -> Inventory {
    let mut node = Inventory {
        runtime: crate::inventory::RuntimeKind::Cri.as_str().into(),
        cri_runtime: runtime_name.into(),
        containers: vec![
            container("web", ContainerState::Running, "app", &[], &[]),
            container("done", ContainerState::Exited, "app", &[], &[]),
        ],
        images: ["app", "mounted", "was-mounted", "unused"]
            .into_iter()
            .map(|id| Image {
                id: id.into(),
                ..Image::default()
            })
            .collect(),
        ..Inventory::default()
    };
    node.containers[0].image_mounts = vec!["mounted".into()];
    node.containers[1].image_mounts = vec!["was-mounted".into()];
    node
}

/// On a CRI node (CRI-O), crictl tries to remove an image a running
/// container mounts as a volume, and CRI-O refuses: it stays. One only
/// an exited container mounts goes, as one no container names.
#[test]
fn crictl_prune_on_a_cri_node_cannot_remove_what_a_running_container_mounts() {
    let v = crictl_rmi_prune(&cri_node_with_mounts("cri-o"));
    assert_eq!(
        removed(&v),
        ids(Kind::Image, &["unused", "was-mounted"]),
        "{v:?}"
    );
    assert!(
        v[&(Kind::Image, "mounted".into())]
            .why
            .starts_with("crictl tries, CRI-O refuses"),
        "{v:?}"
    );
}

/// containerd through CRI (`runtime.kind: cri` at its socket) does not
/// refuse: the image a running container mounts goes too.
#[test]
fn crictl_prune_through_cri_on_containerd_removes_what_a_running_container_mounts() {
    let v = crictl_rmi_prune(&cri_node_with_mounts("containerd"));
    assert_eq!(
        removed(&v),
        ids(Kind::Image, &["mounted", "unused", "was-mounted"]),
        "{v:?}"
    );
}

#[test]
fn nerdctl_prune_takes_every_stopped_container_of_the_namespace_then_unnamed_images() {
    let v = nerdctl_system_prune(&cri_node());
    let mut want = ids(
        Kind::Container,
        &["k8s.io/gone-pod", "k8s.io/init", "k8s.io/native"],
    );
    want.extend(ids(
        Kind::Image,
        &[
            "k8s.io/sha256:init",
            "k8s.io/sha256:tool",
            "k8s.io/sha256:unused",
        ],
    ));
    want.sort();
    assert_eq!(removed(&v), want);
    // The running sandbox names the pause image: kept, pin or not.
    assert!(
        v[&(Kind::Image, "k8s.io/sha256:pause".into())]
            .why
            .starts_with("container k8s.io/pod names it")
    );
    assert_eq!(
        v[&(Kind::Container, "default/other".into())].why,
        "not in k8s.io"
    );
}
