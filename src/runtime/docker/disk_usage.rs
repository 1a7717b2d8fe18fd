//! Build cache records from `/system/df`, read without bollard.
//!
//! bollard's `SystemDataUsageResponse` models only API 1.52's shape
//! (`BuildCacheUsage.Items`), so on older engines every field of
//! `Docker::df()` is `None` (measured on 1.41, which answers with a
//! top-level `BuildCache` array). bollard has no raw-request API, so this is
//! one plain HTTP/1.0 GET on the engine's socket: HTTP/1.0 keeps the answer
//! unchunked, and the connection closes after it. Both shapes are parsed.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::convert::{byte_size, parse_docker_time};
use crate::inventory::{BuildCacheEntry, Image};

/// Every build cache record of the engine at `socket`, asked in API
/// `version` (`1.41`).
///
/// `type=build-cache` spares 1.42+ engines from sizing images, containers
/// and volumes; 1.41 ignores it and computes everything (measured), which
/// makes this the slowest call of an inventory there.
pub(super) async fn build_cache(
    socket: &Path,
    version: &str,
    timeout: Duration,
) -> Result<Vec<BuildCacheEntry>, String> {
    let path = format!("/v{version}/system/df?type=build-cache&verbose=1");
    let raw = get(socket, &path, timeout).await?;
    let body = http_body(&raw).map_err(|e| format!("GET {path}: {e}"))?;
    build_cache_from_df(body).map_err(|e| format!("GET {path}: {e}"))
}

/// What removing each image alone frees, by image id: its size less what
/// it shares with other images (`Size - SharedSize` of `/system/df`).
/// An image whose `SharedSize` is not given (-1) has no entry.
///
/// `type=image` spares 1.42+ engines from sizing the rest; 1.41 sizes
/// everything (slow, and asked only with `images.disk`).
///
/// # Errors
/// When the engine does not answer, or its answer gives no unique size at
/// all (see `unique_sizes_from_df`): the caller says so.
pub(super) async fn image_unique_sizes(
    socket: &Path,
    version: &str,
    timeout: Duration,
) -> Result<HashMap<String, u64>, String> {
    let path = format!("/v{version}/system/df?type=image");
    let raw = get(socket, &path, timeout).await?;
    let body = http_body(&raw).map_err(|e| format!("GET {path}: {e}"))?;
    unique_sizes_from_df(body).map_err(|e| format!("GET {path}: {e}"))
}

/// Gives each of `images` its unique size from `sizes` (a reading of
/// `image_unique_sizes`), never more than its size (the list's, read a
/// moment apart). When the reading failed, every unique size is unknown
/// (`None`: each image's full size stands in, which counts the layers it
/// shares as freed), and one warning says so and why.
pub(super) fn apply_unique_sizes(
    images: &mut [Image],
    sizes: Result<HashMap<String, u64>, String>,
) {
    match sizes {
        Ok(sizes) => {
            for image in images {
                image.unique_size = sizes
                    .get(&image.id)
                    .map(|&unique| image.size.map_or(unique, |size| unique.min(size)));
            }
        }
        Err(e) => {
            for image in images {
                image.unique_size = None;
            }
            tracing::warn!(
                error = %e,
                "docker's /system/df gives no unique image sizes: each image's full size stands \
                 in for what removing it frees (layers shared with other images count as freed)"
            );
        }
    }
}

/// One plain HTTP/1.0 GET of `path` on the engine's socket: the raw answer.
async fn get(socket: &Path, path: &str, timeout: Duration) -> Result<Vec<u8>, String> {
    let request = async {
        let mut stream = tokio::net::UnixStream::connect(socket).await?;
        let head = format!("GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n");
        stream.write_all(head.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    tokio::time::timeout(timeout, request)
        .await
        .map_err(|_| format!("GET {path} timed out"))?
        .map_err(|e| format!("GET {path}: {e}"))
}

/// An image as `/system/df` lists it: the same fields in the legacy
/// `Images` array and in `ImageUsage.Items` (API 1.52+).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ImageUsage {
    id: Option<String>,
    size: Option<i64>,
    shared_size: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ImagesDiskUsage {
    /// Every API up to 1.55 (measured on Docker 29.7.2 without `verbose`);
    /// the API's changelog announces it goes (moby carries a FIXME for it).
    images: Option<Vec<ImageUsage>>,
    /// API 1.52+: the same images under `Items` (with `verbose=1`, the
    /// only list; without it, beside `Images`, measured 1.52 to 1.55).
    image_usage: Option<ItemsUsage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ItemsUsage {
    items: Option<Vec<ImageUsage>>,
}

/// The unique sizes of a `/system/df` answer, from its `Images` list, else
/// its `ImageUsage.Items`.
///
/// An answer with neither list, or with images none of which has a
/// `SharedSize` (-1: not computed), gives no unique size at all: that is an
/// error, for the caller to say, rather than an empty map that would pass
/// for "nothing known" unnoticed. No image at all is no error.
fn unique_sizes_from_df(body: &[u8]) -> Result<HashMap<String, u64>, String> {
    let usage: ImagesDiskUsage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let images = usage
        .images
        .or_else(|| usage.image_usage.and_then(|u| u.items))
        .ok_or("the answer lists no images (neither Images nor ImageUsage.Items)")?;
    let listed = images.len();
    let sizes: HashMap<String, u64> = images
        .into_iter()
        .filter_map(|i| {
            let size = i.size.and_then(byte_size)?;
            // -1: not computed.
            let shared = i.shared_size.and_then(byte_size)?;
            Some((i.id?, size.saturating_sub(shared)))
        })
        .collect();
    if sizes.is_empty() && listed > 0 {
        return Err(format!(
            "none of the {listed} images listed has a SharedSize"
        ));
    }
    Ok(sizes)
}

/// The body of a raw HTTP/1.x response, if its status is 2xx.
fn http_body(raw: &[u8]) -> Result<&[u8], String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers in the response")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let body = &raw[split + 4..];
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(format!(
            "status {status}: {}",
            String::from_utf8_lossy(body).trim()
        ))
    }
}

/// One build cache record as `/system/df` gives it: the same fields in the
/// 1.41 array and in 1.52's `BuildCacheUsage.Items`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BuildCacheRecord {
    #[serde(rename = "ID")]
    id: Option<String>,
    description: Option<String>,
    in_use: Option<bool>,
    size: Option<i64>,
    created_at: Option<String>,
    last_used_at: Option<String>,
    /// The record it was built on, before `Parents` (API < 1.42).
    parent: Option<String>,
    parents: Option<Vec<String>>,
    /// Docker 29 sends `Parents` under this key, leading space and all
    /// (moby `api/types/build/cache.go`, its struct tag).
    #[serde(rename = " Parents")]
    parents_spaced: Option<Vec<String>>,
}

impl BuildCacheRecord {
    /// Every parent it names, in any of the three keys, each once.
    fn all_parents(&mut self) -> Vec<String> {
        let mut all: Vec<String> = self
            .parent
            .take()
            .into_iter()
            .chain(self.parents.take().unwrap_or_default())
            .chain(self.parents_spaced.take().unwrap_or_default())
            .filter(|p| !p.is_empty())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DiskUsage {
    /// API < 1.52.
    build_cache: Option<Vec<BuildCacheRecord>>,
    /// API 1.52+.
    build_cache_usage: Option<BuildCacheUsage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BuildCacheUsage {
    items: Option<Vec<BuildCacheRecord>>,
}

/// Build cache entries from a `/system/df` body of either API shape.
fn build_cache_from_df(body: &[u8]) -> Result<Vec<BuildCacheEntry>, serde_json::Error> {
    let usage: DiskUsage = serde_json::from_slice(body)?;
    let records = usage
        .build_cache
        .or_else(|| usage.build_cache_usage.and_then(|u| u.items))
        .unwrap_or_default();
    let mut entries: Vec<BuildCacheEntry> = records
        .into_iter()
        .filter_map(|mut r| {
            Some(BuildCacheEntry {
                parents: r.all_parents(),
                id: r.id.filter(|id| !id.is_empty())?,
                description: r.description.unwrap_or_default(),
                created: r.created_at.as_deref().and_then(parse_docker_time),
                last_used: r.last_used_at.as_deref().and_then(parse_docker_time),
                size: r.size.and_then(byte_size),
                in_use: r.in_use.unwrap_or(false),
            })
        })
        .collect();
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_body_needs_a_2xx_status() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}";
        assert_eq!(http_body(ok).unwrap(), b"{\"a\":1}");
        let err = b"HTTP/1.0 400 Bad Request\r\n\r\n{\"message\":\"bad\"}";
        assert!(http_body(err).unwrap_err().contains("400"));
        assert!(http_body(b"garbage").is_err());
    }

    #[test]
    fn unique_sizes_are_size_less_shared_size_where_both_are_known() {
        let df = br#"{"Images":[
            {"Id":"sha256:a","Size":100,"SharedSize":60},
            {"Id":"sha256:b","Size":100,"SharedSize":-1},
            {"Id":"sha256:c","Size":50,"SharedSize":0}]}"#;
        let sizes = unique_sizes_from_df(df).unwrap();
        assert_eq!(sizes.get("sha256:a"), Some(&40));
        assert_eq!(sizes.get("sha256:b"), None);
        assert_eq!(sizes.get("sha256:c"), Some(&50));
        // No image at all: nothing to know.
        assert!(
            unique_sizes_from_df(br#"{"Images":[]}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn unique_sizes_come_from_image_usage_items_without_the_images_list() {
        // API 1.52+ with `verbose=1`, as measured on Docker 29.7.2: the
        // images only under ImageUsage.Items.
        let df = br#"{"ImageUsage":{"ActiveCount":0,"TotalCount":2,"TotalSize":150,
            "Reclaimable":150,"Items":[
            {"Id":"sha256:a","Size":100,"SharedSize":60,"Containers":0},
            {"Id":"sha256:c","Size":50,"SharedSize":0}]}}"#;
        let sizes = unique_sizes_from_df(df).unwrap();
        assert_eq!(sizes.get("sha256:a"), Some(&40));
        assert_eq!(sizes.get("sha256:c"), Some(&50));
        // Both lists (1.52 to 1.55 without `verbose`): `Images` is read.
        let both = br#"{"Images":[{"Id":"sha256:a","Size":100,"SharedSize":10}],
            "ImageUsage":{"Items":[{"Id":"sha256:a","Size":100,"SharedSize":60}]}}"#;
        assert_eq!(
            unique_sizes_from_df(both).unwrap().get("sha256:a"),
            Some(&90)
        );
    }

    #[test]
    fn an_answer_without_shared_sizes_is_an_error_to_report_not_an_empty_map() {
        // The legacy list gone and nothing in its place (only the totals).
        let totals = br#"{"LayersSize":9921390,"ImageUsage":{"ActiveCount":0,
            "TotalCount":5,"TotalSize":9921390,"Reclaimable":9921390}}"#;
        let e = unique_sizes_from_df(totals).unwrap_err();
        assert!(e.contains("lists no images"), "{e}");
        assert!(unique_sizes_from_df(b"{}").is_err());
        // Images listed, none with a SharedSize: -1 (not computed) or absent.
        let uncomputed = br#"{"Images":[
            {"Id":"sha256:a","Size":100,"SharedSize":-1},
            {"Id":"sha256:b","Size":70}]}"#;
        let e = unique_sizes_from_df(uncomputed).unwrap_err();
        assert!(
            e.contains("none of the 2 images listed has a SharedSize"),
            "{e}"
        );
    }

    /// Every event logged at WARN or above while `f` runs, as text.
    fn warnings_of(f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = buffer.0.lock().unwrap().clone();
        String::from_utf8(text).unwrap()
    }

    fn sized(id: &str, size: u64) -> Image {
        Image {
            id: id.to_owned(),
            size: Some(size),
            ..Image::default()
        }
    }

    #[test]
    fn without_shared_sizes_unique_sizes_are_unknown_and_a_warning_says_so() {
        // A /system/df answer that has lost its legacy `Images` list and
        // lists nothing in its place.
        let df = br#"{"LayersSize":300,"ImageUsage":{"TotalCount":2,"TotalSize":300}}"#;
        let mut images = vec![sized("sha256:a", 100), sized("sha256:b", 200)];
        images[1].unique_size = Some(7);
        let logged = warnings_of(|| apply_unique_sizes(&mut images, unique_sizes_from_df(df)));
        assert!(images.iter().all(|i| i.unique_size.is_none()), "{images:?}");
        assert_eq!(logged.lines().count(), 1, "{logged}");
        assert!(logged.contains("WARN"), "{logged}");
        assert!(logged.contains("gives no unique image sizes"), "{logged}");
        assert!(logged.contains("lists no images"), "{logged}");
        // Every SharedSize -1: the same, with its own reason.
        let df = br#"{"Images":[{"Id":"sha256:a","Size":100,"SharedSize":-1}]}"#;
        let logged = warnings_of(|| apply_unique_sizes(&mut images, unique_sizes_from_df(df)));
        assert!(images.iter().all(|i| i.unique_size.is_none()));
        assert!(
            logged.contains("none of the 1 images listed has a SharedSize"),
            "{logged}"
        );
    }

    #[test]
    fn unique_sizes_are_applied_quietly_and_never_exceed_the_size() {
        let df = br#"{"Images":[
            {"Id":"sha256:a","Size":100,"SharedSize":40},
            {"Id":"sha256:b","Size":300,"SharedSize":0},
            {"Id":"sha256:c","Size":50,"SharedSize":-1}]}"#;
        let mut images = vec![
            sized("sha256:a", 100),
            // Listed smaller a moment before /system/df was read.
            sized("sha256:b", 250),
            sized("sha256:c", 50),
        ];
        let logged = warnings_of(|| apply_unique_sizes(&mut images, unique_sizes_from_df(df)));
        assert_eq!(logged, "");
        let unique: Vec<Option<u64>> = images.iter().map(|i| i.unique_size).collect();
        assert_eq!(unique, [Some(60), Some(250), None]);
    }

    #[test]
    fn build_cache_from_both_df_shapes() {
        // API 1.41, as measured: a top-level array.
        let legacy = br#"{"LayersSize":3,"Images":[],"BuildCache":[
            {"ID":"xfzro1bqaozbipmoy0gch83dw","Parent":"","Type":"regular",
             "Description":"fileop target","InUse":false,"Shared":true,"Size":3,
             "CreatedAt":"2026-11-22T16:35:16.226165852Z",
             "LastUsedAt":"2026-11-22T16:35:16.245494149Z","UsageCount":1},
            {"ID":"","Size":1}],"BuilderSize":29}"#;
        let entries = build_cache_from_df(legacy).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].id, "xfzro1bqaozbipmoy0gch83dw");
        assert_eq!(entries[0].size, Some(3));
        assert!(entries[0].last_used.is_some());
        // API 1.52: under BuildCacheUsage.Items; LastUsedAt may be null.
        let new = br#"{"BuildCacheUsage":{"TotalSize":5,"Items":[
            {"ID":"b2","Type":"source.local","InUse":true,"LastUsedAt":null}]}}"#;
        let entries = build_cache_from_df(new).unwrap();
        assert_eq!(entries[0].id, "b2");
        assert!(entries[0].in_use);
        assert_eq!(entries[0].last_used, None);
        // Nothing at all: no records.
        assert!(build_cache_from_df(b"{}").unwrap().is_empty());
        // A record's parents, under each key an engine has used: 1.41's
        // `Parent`, `Parents`, and Docker 29's `" Parents"`.
        let parents = br#"{"BuildCache":[
            {"ID":"a","Parent":"p0"},
            {"ID":"b","Parents":["p1","p2"]},
            {"ID":"c"," Parents":["p3"],"Parent":""}]}"#;
        let entries = build_cache_from_df(parents).unwrap();
        let of = |n: usize| entries[n].parents.clone();
        assert_eq!(of(0), ["p0"]);
        assert_eq!(of(1), ["p1", "p2"]);
        assert_eq!(of(2), ["p3"]);
        assert!(
            build_cache_from_df(br#"{"BuildCache":null}"#)
                .unwrap()
                .is_empty()
        );
    }
}
