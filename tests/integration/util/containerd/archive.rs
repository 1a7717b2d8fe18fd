//! OCI image archives for `ctr images import`: there is no registry here.

use serde_json::json;

use super::Imported;
use crate::util::{busybox_rootfs, oci};

/// An OCI image archive (`oci-layout`, `index.json`, blobs) of one busybox
/// image per name in `names`, as `ctr images import` reads it, and what
/// each is. The images share one layer and differ by their config (its
/// creation time and their place in `names`), so each is distinct, like a
/// `docker import`. A name travels in the annotation containerd's importer
/// reads for a full reference, `io.containerd.image.name`.
///
/// With `extra`, each image has a layer of its own instead, which holds a
/// file of the image's name followed by `extra`: images of known sizes.
pub(super) fn images_archive(
    names: &[&str],
    entrypoint: &[&str],
    extra: Option<&str>,
) -> (Vec<u8>, Vec<Imported>) {
    let shared = busybox_rootfs(None);
    let created = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let mut images = Vec::new();
    let mut layer_lens = Vec::new();
    let mut layers = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let layer = match extra {
            Some(extra) => busybox_rootfs(Some(&format!("{name}{extra}"))),
            None => shared.clone(),
        };
        let labels = json!({ "safeprune.test/n": n.to_string() });
        let image = oci::Image::new(&layer, entrypoint, &created, &labels);
        layer_lens.push(layer.len());
        // The shared layer once.
        if extra.is_some() || n == 0 {
            layers.push((image.layer_digest.clone(), layer));
        }
        images.push(image);
    }
    let imported = images
        .iter()
        .zip(layer_lens)
        .map(|(image, layer_len)| Imported {
            digest: image.manifest_digest.clone(),
            config_digest: image.config_digest.clone(),
            content_bytes: (layer_len + image.config.len() + image.manifest.len()) as u64,
            layer_digest: image.layer_digest.clone(),
        })
        .collect();
    let descriptors: Vec<_> = images
        .iter()
        .zip(names)
        .map(|(image, name)| image.descriptor(Some(name)))
        .collect();
    let mut blobs: Vec<(&str, &[u8])> = Vec::new();
    for image in &images {
        blobs.push((&image.config_digest, &image.config));
        blobs.push((&image.manifest_digest, &image.manifest));
    }
    for (digest, layer) in &layers {
        blobs.push((digest, layer));
    }
    (oci::layout_tar(&descriptors, &blobs, &[]), imported)
}
