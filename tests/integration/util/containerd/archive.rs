//! OCI image archives for `ctr images import`: there is no registry here.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::Imported;
use crate::util::busybox_rootfs;

fn digest(data: &[u8]) -> String {
    let hash = Sha256::digest(data);
    hash.iter().fold(String::from("sha256:"), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

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
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut manifests = Vec::new();
    let mut imported = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let layer = match extra {
            Some(extra) => busybox_rootfs(Some(&format!("{name}{extra}"))),
            None => shared.clone(),
        };
        let layer_digest = digest(&layer);
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "created": created,
            "config": {
                "Entrypoint": entrypoint,
                "Env": ["PATH=/bin"],
                "Labels": { "safeprune.test/n": n.to_string() },
            },
            "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
        })
        .to_string()
        .into_bytes();
        let config_digest = digest(&config);
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": layer.len(),
            }],
        })
        .to_string()
        .into_bytes();
        let manifest_digest = digest(&manifest);
        manifests.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "annotations": { "io.containerd.image.name": name },
            "platform": { "architecture": "amd64", "os": "linux" },
        }));
        imported.push(Imported {
            digest: manifest_digest.clone(),
            config_digest: config_digest.clone(),
            content_bytes: (layer.len() + config.len() + manifest.len()) as u64,
            layer_digest: layer_digest.clone(),
        });
        blobs.push((config_digest, config));
        blobs.push((manifest_digest, manifest));
        if extra.is_some() || n == 0 {
            blobs.push((layer_digest, layer));
        }
    }
    let index = serde_json::json!({ "schemaVersion": 2, "manifests": manifests })
        .to_string()
        .into_bytes();
    let mut tar = tar::Builder::new(Vec::new());
    let mut append = |path: &str, data: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        tar.append_data(&mut header, path, data)
            .expect("tar an archive entry");
    };
    append("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    append("index.json", &index);
    for (d, data) in &blobs {
        append(
            &format!("blobs/sha256/{}", d.trim_start_matches("sha256:")),
            data,
        );
    }
    (tar.into_inner().expect("finish the archive"), imported)
}
