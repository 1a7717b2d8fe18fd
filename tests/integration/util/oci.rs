//! OCI image blobs and layout archives, as `ctr images import`, `copyimg`
//! and `docker load` read them: there is no registry here. One builder for
//! every engine's test images.

use serde_json::{Value, json};

use super::image::digest_of;

/// The `sha256:` digest of `data`.
pub fn digest(data: &[u8]) -> String {
    digest_of(&mut &data[..])
}

/// The OCI image architecture of this machine, whose busybox the images
/// hold.
pub fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// One image of one uncompressed layer: its config and manifest, and the
/// digests of the three.
pub struct Image {
    pub config: Vec<u8>,
    pub config_digest: String,
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
    pub layer_digest: String,
    /// The platform's architecture, `amd64` or another.
    pub architecture: String,
}

impl Image {
    /// The image of `layer`, with `entrypoint`, built at `created`, with
    /// these config `labels` (a JSON object, or `null` for none).
    pub fn new(layer: &[u8], entrypoint: &[&str], created: &str, labels: &Value) -> Self {
        Self::for_arch(layer, entrypoint, created, labels, arch())
    }

    /// [`Self::new`] for the platform `linux/<architecture>`.
    pub fn for_arch(
        layer: &[u8],
        entrypoint: &[&str],
        created: &str,
        labels: &Value,
        architecture: &str,
    ) -> Self {
        let layer_digest = digest(layer);
        let mut runtime_config = json!({ "Entrypoint": entrypoint, "Env": ["PATH=/bin"] });
        if !labels.is_null() {
            runtime_config["Labels"] = labels.clone();
        }
        let config = json!({
            "architecture": architecture,
            "os": "linux",
            "created": created,
            "config": runtime_config,
            "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
        })
        .to_string()
        .into_bytes();
        let config_digest = digest(&config);
        let manifest = json!({
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
        Self {
            config,
            config_digest,
            manifest,
            manifest_digest,
            layer_digest,
            architecture: architecture.to_owned(),
        }
    }

    /// Its descriptor in an index, named `name` when given
    /// (`io.containerd.image.name`, the full reference importers read).
    pub fn descriptor(&self, name: Option<&str>) -> Value {
        let mut descriptor = json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": self.manifest_digest,
            "size": self.manifest.len(),
            "platform": { "architecture": self.architecture, "os": "linux" },
        });
        if let Some(name) = name {
            descriptor["annotations"] = json!({ "io.containerd.image.name": name });
        }
        descriptor
    }
}

/// The `manifest.json` `docker save` writes beside the layout since Docker
/// 25, and `docker load` on a graph driver store reads: `image`, named
/// `name`.
pub fn docker_load_manifest(image: &Image, name: &str) -> String {
    let blob = |digest: &str| format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    json!([{
        "Config": blob(&image.config_digest),
        "RepoTags": [name],
        "Layers": [blob(&image.layer_digest)],
    }])
    .to_string()
}

/// The tar of an OCI layout: `oci-layout`, `index.json` listing
/// `descriptors`, each blob under `blobs/sha256/`, then `files` as they
/// are (`manifest.json`, which `docker load` on a graph driver reads).
pub fn layout_tar(
    descriptors: &[Value],
    blobs: &[(&str, &[u8])],
    files: &[(&str, &[u8])],
) -> Vec<u8> {
    let index = json!({ "schemaVersion": 2, "manifests": descriptors })
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
    for (digest, data) in blobs {
        append(
            &format!("blobs/sha256/{}", digest.trim_start_matches("sha256:")),
            data,
        );
    }
    for (path, data) in files {
        append(path, data);
    }
    tar.into_inner().expect("finish the archive")
}
