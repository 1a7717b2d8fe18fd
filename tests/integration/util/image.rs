//! The container image `scripts/image.sh` builds from the test's own
//! binary, and its archives read back: the root file system's entries and
//! the OCI archive's index, manifest and config.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::run_ok;

/// The binary under test, which the image is built from.
pub const BINARY: &str = env!("CARGO_BIN_EXE_safeprune");

/// The image's name: `localhost/safeprune:<Cargo.toml's version>`.
pub fn image_name() -> String {
    format!("localhost/safeprune:{}", env!("CARGO_PKG_VERSION"))
}

/// How `scripts/image.sh` strips its copy of the binary, as cargo deb strips
/// the Debian package's: the image's binary must be the given one with
/// these applied, no more and no less.
const STRIP: [&str; 3] = [
    "--strip-unneeded",
    "--remove-section=.comment",
    "--remove-section=.note",
];

/// One run of `scripts/image.sh --binary <binary> --out <dir>/out` on the
/// binary under test, with no `SOURCE_DATE_EPOCH`, and beside it that
/// binary stripped as the script must strip it, to compare. The directory
/// goes on drop.
pub struct BuiltImage {
    dir: tempfile::TempDir,
}

impl BuiltImage {
    /// Runs the script and strips a copy of the binary.
    ///
    /// # Panics
    /// When either fails; the message holds its output.
    pub fn build() -> Self {
        let dir = tempfile::tempdir().expect("create a directory for the image");
        let image = Self { dir };
        run_ok(
            Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/image.sh"))
                .arg("--binary")
                .arg(BINARY)
                .arg("--out")
                .arg(image.dir.path().join("out"))
                .env_remove("SOURCE_DATE_EPOCH"),
        );
        run_ok(
            Command::new("strip")
                .args(STRIP)
                .arg("-o")
                .arg(image.stripped_binary())
                .arg(BINARY),
        );
        image
    }

    /// The binary stripped as the image's must be.
    pub fn stripped_binary(&self) -> PathBuf {
        self.dir.path().join("safeprune.stripped")
    }

    /// The assembled root, as the Dockerfile copies it.
    pub fn rootfs(&self) -> PathBuf {
        self.dir.path().join("out/rootfs")
    }

    /// The root as a tar, for `docker import`.
    pub fn rootfs_tar(&self) -> PathBuf {
        self.dir.path().join("out/safeprune-rootfs.tar")
    }

    /// The OCI image archive, for `ctr images import`.
    pub fn oci_tar(&self) -> PathBuf {
        self.dir.path().join("out/safeprune-oci.tar")
    }
}

/// What a tar entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    /// A regular file, by its digest (`sha256:<hex>`) and mode.
    File {
        digest: String,
        mode: u32,
    },
    /// A symlink, by its target.
    Link(String),
}

/// A tar entry's node and the metadata that must not vary.
#[derive(Debug, Clone)]
pub struct Entry {
    pub node: Node,
    pub uid: u64,
    pub gid: u64,
    pub mtime: u64,
}

/// The entries of a tar, by path without a trailing `/`.
///
/// # Panics
/// On an entry that is no directory, regular file or symlink: pax headers
/// (which carry access times) and hard links included.
pub fn entries(tar: &Path) -> BTreeMap<String, Entry> {
    let mut archive = tar::Archive::new(File::open(tar).expect("open the tar"));
    let mut found = BTreeMap::new();
    for entry in archive.entries().expect("read the tar") {
        let mut entry = entry.expect("read a tar entry");
        let header = entry.header().clone();
        let path = entry
            .path()
            .expect("entry path")
            .to_string_lossy()
            .into_owned();
        let path = path.trim_end_matches('/').to_owned();
        let node = match header.entry_type() {
            tar::EntryType::Directory => Node::Dir,
            tar::EntryType::Regular => Node::File {
                digest: digest_of(&mut entry),
                mode: header.mode().expect("entry mode"),
            },
            tar::EntryType::Symlink => Node::Link(
                header
                    .link_name()
                    .expect("link name")
                    .expect("a symlink has a target")
                    .to_string_lossy()
                    .into_owned(),
            ),
            other => panic!("{path}: unexpected tar entry type {other:?}"),
        };
        assert!(
            entry.pax_extensions().expect("read pax").is_none(),
            "{path}: pax headers"
        );
        let entry = Entry {
            node,
            uid: header.uid().expect("uid"),
            gid: header.gid().expect("gid"),
            mtime: header.mtime().expect("mtime"),
        };
        assert!(found.insert(path.clone(), entry).is_none(), "{path} twice");
    }
    found
}

/// Follows `path` (absolute, as the loader would) through the entries,
/// symlinks resolved against the root of the tar. Returns the entry it
/// ends at and the symlinks met on the way; `None` if it leads nowhere.
pub fn resolve(entries: &BTreeMap<String, Entry>, path: &str) -> Option<(String, Vec<String>)> {
    let mut todo: Vec<String> = path.split('/').rev().map(str::to_owned).collect();
    let mut at: Vec<String> = Vec::new();
    let mut links = Vec::new();
    while let Some(part) = todo.pop() {
        match part.as_str() {
            "" | "." => continue,
            ".." => {
                at.pop();
                continue;
            }
            _ => at.push(part),
        }
        let key = at.join("/");
        match &entries.get(&key)?.node {
            Node::Link(target) => {
                if links.len() > 40 {
                    return None;
                }
                links.push(key);
                at.pop();
                if target.starts_with('/') {
                    at.clear();
                }
                todo.extend(target.split('/').rev().map(str::to_owned));
            }
            Node::File { .. } if !todo.iter().all(String::is_empty) => return None,
            Node::File { .. } | Node::Dir => {}
        }
    }
    Some((at.join("/"), links))
}

/// The shared libraries and the loader `ldd` names for `binary`, as the
/// host's paths.
pub fn ldd(binary: &Path) -> Vec<String> {
    let out = Command::new("ldd").arg(binary).output().expect("run ldd");
    assert!(out.status.success(), "ldd {} failed", binary.display());
    String::from_utf8(out.stdout)
        .expect("ldd prints text")
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = line.split_once("=> ").map_or(line, |(_, path)| path);
            path.starts_with('/')
                .then(|| path.split_whitespace().next().unwrap_or(path).to_owned())
        })
        .collect()
}

/// The relative paths of everything under `dir`, directories included.
pub fn tree(dir: &Path) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("read a directory").flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(dir).expect("under the root");
            paths.insert(relative.to_string_lossy().into_owned());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(path);
            }
        }
    }
    paths
}

/// `sha256:<hex>` of what `reader` holds.
pub fn digest_of(reader: &mut impl Read) -> String {
    let mut hasher = Sha256::new();
    io::copy(reader, &mut hasher).expect("read to hash");
    hasher
        .finalize()
        .iter()
        .fold(String::from("sha256:"), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

/// `sha256:<hex>` of a file.
pub fn file_digest(path: &Path) -> String {
    digest_of(&mut File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display())))
}

/// A host file's permission bits.
pub fn file_mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").mode() & 0o7777
}

/// The OCI archive read back: `index.json`, and each small JSON blob
/// (manifest, config) by digest, checked against its name; the layer by
/// its digest and size only.
pub struct OciArchive {
    pub index: Value,
    pub oci_layout: Value,
    /// Digest to size and content.
    pub json_blobs: BTreeMap<String, (u64, Value)>,
    pub layers: BTreeMap<String, u64>,
}

impl OciArchive {
    pub fn read(path: &Path) -> Self {
        let mut archive = tar::Archive::new(File::open(path).expect("open the OCI archive"));
        let (mut index, mut oci_layout) = (Value::Null, Value::Null);
        let (mut json_blobs, mut layers) = (BTreeMap::new(), BTreeMap::new());
        for entry in archive.entries().expect("read the OCI archive") {
            let mut entry = entry.expect("read an entry");
            if entry.header().entry_type() != tar::EntryType::Regular {
                continue;
            }
            let name = entry.path().expect("path").to_string_lossy().into_owned();
            let size = entry.size();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).expect("read an entry");
            let json = || serde_json::from_slice(&bytes).expect("a JSON file");
            match name.strip_prefix("blobs/sha256/") {
                Some(hex) => {
                    let digest = format!("sha256:{hex}");
                    assert_eq!(digest_of(&mut bytes.as_slice()), digest, "{name}");
                    if bytes.first() == Some(&b'{') {
                        json_blobs.insert(digest, (size, json()));
                    } else {
                        layers.insert(digest, size);
                    }
                }
                None if name == "index.json" => index = json(),
                None if name == "oci-layout" => oci_layout = json(),
                None => panic!("unexpected {name} in the OCI archive"),
            }
        }
        Self {
            index,
            oci_layout,
            json_blobs,
            layers,
        }
    }

    /// The blob a descriptor points at, its size checked.
    pub fn json(&self, descriptor: &Value) -> &Value {
        let digest = descriptor["digest"].as_str().expect("a digest");
        let (size, blob) = &self.json_blobs[digest];
        assert_eq!(descriptor["size"].as_u64(), Some(*size), "{digest}: size");
        blob
    }
}
