//! containerd's image records as the inventory's images: pure conversions.
//!
//! containerd has no image ids, only named records, each pointing at a
//! target (an index or a manifest). Several records may point at the same
//! target: a tag and its digest reference, and, in the CRI namespace, CRI's
//! own record of the image id, named `sha256:<config digest>` (measured:
//! every image CRI sees gets one). Removing one record frees nothing while
//! another holds the content, so safeprune's image is all records of one
//! namespace with the same target, and its id is `<namespace>/<target>`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use containerd_client::services::v1::{Image as ImageRecord, Info};

use super::convert::{NamespaceData, label, qualified, timestamp};
use crate::inventory::Image;
use crate::inventory::{reference_forms, refs};
use crate::runtime::grpc::containerd::{provenance_of, reachable};

/// containerd 1.6.22+ and 1.7.3+ pin the sandbox image with this label.
const LABEL_PINNED: &str = "io.cri-containerd.pinned";
const PINNED: &str = "pinned";
/// What pins the images of one namespace, besides containerd's label.
#[derive(Debug, Default)]
pub(super) struct Pins {
    /// Names pinned by the runtime's configuration: the sandbox image, and
    /// sandboxes' images when CRI does not answer.
    pub names: Vec<String>,
    /// Names of the images CRI reports pinned.
    pub cri: Vec<String>,
}

/// The images of one namespace, one per target. An image with a name in
/// `pins` (in any spelling), or containerd's pinned label, is pinned; one
/// named in `pins.cri` is also what CRI reports pinned.
pub(super) fn images_of(data: &NamespaceData, pins: &Pins) -> Vec<Image> {
    let mut by_target: BTreeMap<&str, Vec<&ImageRecord>> = BTreeMap::new();
    for record in &data.images {
        match record.target.as_ref().map(|t| t.digest.as_str()) {
            Some(digest) if !digest.is_empty() && !record.name.is_empty() => {
                by_target.entry(digest).or_default().push(record);
            }
            _ => tracing::debug!(name = %record.name, "image record without a target, skipped"),
        }
    }
    let forms = |names: &[String]| -> BTreeSet<String> {
        names.iter().flat_map(|n| reference_forms(n)).collect()
    };
    let pinned_forms = forms(&pins.names);
    let cri_forms = forms(&pins.cri);
    by_target
        .into_iter()
        .map(|(digest, records)| {
            image(
                &data.namespace,
                digest,
                &records,
                (&pinned_forms, &cri_forms),
                &data.content,
            )
        })
        .collect()
}

/// The records of one namespace that point at `digest`, sorted by name.
pub(super) fn records_of<'a>(
    images: impl IntoIterator<Item = &'a ImageRecord>,
    digest: &str,
) -> Vec<&'a ImageRecord> {
    let mut records: Vec<&ImageRecord> = images
        .into_iter()
        .filter(|i| i.target.as_ref().is_some_and(|t| t.digest == digest))
        .filter(|i| !i.name.is_empty())
        .collect();
    records.sort_by(|a, b| a.name.cmp(&b.name));
    records
}

fn image(
    namespace: &str,
    digest: &str,
    records: &[&ImageRecord],
    (pinned_forms, cri_forms): (&BTreeSet<String>, &BTreeSet<String>),
    content: &HashMap<String, Info>,
) -> Image {
    let mut tags = BTreeSet::new();
    let mut digests = BTreeSet::new();
    for record in records {
        let name = record.name.as_str();
        if name.starts_with("sha256:") {
            // CRI's record of the image id: no reference at all.
        } else if name.contains('@') {
            digests.insert(name.to_owned());
        } else {
            tags.insert(name.to_owned());
            digests.insert(format!("{}@{digest}", refs::repository(name)));
        }
    }
    let named_in = |forms: &BTreeSet<String>| {
        records
            .iter()
            .any(|r| reference_forms(&r.name).iter().any(|f| forms.contains(f)))
    };
    let cri_pinned = named_in(cri_forms);
    let pinned = cri_pinned
        || named_in(pinned_forms)
        || records
            .iter()
            .any(|r| label(&r.labels, LABEL_PINNED) == Some(PINNED));
    Image {
        parent: None,
        id: qualified(namespace, digest),
        tags: tags.into_iter().collect(),
        digests: digests.into_iter().collect(),
        created: records
            .iter()
            .filter_map(|r| timestamp(r.created_at.as_ref()))
            .min(),
        // Updated when a name is (re)pointed: a pull, a tag, an import.
        last_tagged: records
            .iter()
            .filter_map(|r| timestamp(r.updated_at.as_ref()))
            .max(),
        size: content_size(digest, content),
        pinned,
        cri_pinned,
        unique_size: None,
        recorded_use: None,
        first_seen: None,
        provenance: provenance_of(content.get(digest)),
    }
}

/// The bytes of an image's content in the store: its target and every blob
/// reachable from it through the garbage collector's labels (manifests of
/// the platforms present, configs, layers), each counted once. That is the
/// compressed size `ctr images ls` shows; unpacked snapshots come on top,
/// and a layer shared by two images counts in both. `None` when the target
/// itself is not in the store.
pub(super) fn content_size(target: &str, content: &HashMap<String, Info>) -> Option<u64> {
    content.get(target)?;
    Some(reachable(target, content).into_values().sum())
}

/// What removing each image of `images` alone frees of the content store:
/// the bytes of its blobs that no other of `images` reaches (a base layer
/// two images share frees nothing while either stays). Unpacked snapshots
/// come on top: they are not counted. Each image's `unique_size` is set
/// where its target is in its namespace's store.
pub(super) fn with_unique_sizes(images: &mut [Image], data: &[NamespaceData]) {
    let contents: HashMap<&str, &HashMap<String, Info>> = data
        .iter()
        .map(|d| (d.namespace.as_str(), &d.content))
        .collect();
    // Blobs by digest alone: namespaces share a blob on disk, and it stays
    // while any of them references it. An image whose namespace is not in
    // `data` reaches nothing.
    let reached: Vec<Option<BTreeMap<&str, u64>>> = images
        .iter()
        .map(|image| {
            let (namespace, target) = image.id.split_once('/')?;
            let content: &HashMap<String, Info> = contents.get(namespace)?;
            let (target, _) = content.get_key_value(target)?;
            Some(reachable(target, content))
        })
        .collect();
    let mut holders: HashMap<&str, usize> = HashMap::new();
    for blobs in reached.iter().flatten() {
        for digest in blobs.keys() {
            *holders.entry(digest).or_default() += 1;
        }
    }
    for (image, reached) in images.iter_mut().zip(&reached) {
        if let Some(blobs) = reached {
            image.unique_size = Some(
                blobs
                    .iter()
                    .filter(|(digest, _)| holders.get(**digest) == Some(&1))
                    .map(|(_, size)| size)
                    .sum(),
            );
        }
    }
}

#[cfg(test)]
mod tests;
