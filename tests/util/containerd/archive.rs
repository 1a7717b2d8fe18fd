//! OCI image archives for `ctr images import`: there is no registry here.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::Imported;
use crate::util::busybox_rootfs;

/// An OCI image archive (`oci-layout`, `index.json`, blobs) of a busybox
/// image named `name`, as `ctr images import` reads it, and its manifest
/// digest. The name travels in the annotation containerd's importer reads
/// for a full reference, `io.containerd.image.name`.
pub(super) fn image_archive(name: &str, entrypoint: &[&str]) -> (Vec<u8>, Imported) {
    fn digest(data: &[u8]) -> String {
        let hash = Sha256::digest(data);
        hash.iter().fold(String::from("sha256:"), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
    }
    let layer = busybox_rootfs(None);
    let layer_digest = digest(&layer);
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        // Distinct per import, like `docker import`.
        "created": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "config": { "Entrypoint": entrypoint, "Env": ["PATH=/bin"] },
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
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "annotations": { "io.containerd.image.name": name },
            "platform": { "architecture": "amd64", "os": "linux" },
        }],
    })
    .to_string()
    .into_bytes();
    let imported = Imported {
        digest: manifest_digest.clone(),
        config_digest: config_digest.clone(),
        content_bytes: (layer.len() + config.len() + manifest.len()) as u64,
    };
    let mut tar = tar::Builder::new(Vec::new());
    let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
    let entries: [(String, &[u8]); 5] = [
        (
            "oci-layout".to_owned(),
            br#"{"imageLayoutVersion":"1.0.0"}"#,
        ),
        ("index.json".to_owned(), &index),
        (blob(&layer_digest), &layer),
        (blob(&config_digest), &config),
        (blob(&manifest_digest), &manifest),
    ];
    for (path, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        tar.append_data(&mut header, path, data)
            .expect("tar an archive entry");
    }
    (tar.into_inner().expect("finish the archive"), imported)
}
