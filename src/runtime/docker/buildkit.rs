//! Build cache records asked of dockerd's own `BuildKit`, for engines whose
//! `/system/df` cannot be limited to the build cache.
//!
//! API 1.41 ignores `type=build-cache` and sizes every image, container
//! and volume for `/system/df` (measured: the slowest call of an
//! inventory). dockerd serves `BuildKit`'s control API on the same socket:
//! `POST /grpc` with `Upgrade: h2c` turns the connection into HTTP/2, on
//! which `BuildKit`'s `Control/DiskUsage` answers with the build cache alone
//! (what `docker buildx du` asks, and what dockerd's `/system/df` itself
//! converts). The messages below are the fields of `BuildKit`'s
//! `api/services/control/control.proto` that safeprune reads; prost skips
//! the others.

use std::path::{Path, PathBuf};
use std::time::Duration;

use containerd_client::tonic::codegen::http::uri::PathAndQuery;
use containerd_client::tonic::transport::Endpoint;
use containerd_client::tonic::{self, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::convert::byte_size;
use crate::inventory::BuildCacheEntry;
use crate::runtime::grpc::protobuf_time as timestamp;

const DISK_USAGE: &str = "/moby.buildkit.v1.Control/DiskUsage";
/// The upgrade request; dockerd answers `101 Switching Protocols` and
/// then speaks HTTP/2 (its SETTINGS frame may follow in the same read).
const UPGRADE: &[u8] =
    b"POST /grpc HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n";
/// The longest upgrade answer read before giving up.
const MAX_UPGRADE_ANSWER: usize = 4096;

#[derive(Clone, PartialEq, prost::Message)]
struct DiskUsageRequest {
    #[prost(string, repeated, tag = "1")]
    filter: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct DiskUsageResponse {
    #[prost(message, repeated, tag = "1")]
    record: Vec<UsageRecord>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct UsageRecord {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(bool, tag = "3")]
    in_use: bool,
    #[prost(int64, tag = "4")]
    size: i64,
    /// Deprecated for `parents`, still sent by older `BuildKit`s.
    #[prost(string, tag = "5")]
    parent: String,
    #[prost(message, optional, tag = "6")]
    created_at: Option<prost_types::Timestamp>,
    #[prost(message, optional, tag = "7")]
    last_used_at: Option<prost_types::Timestamp>,
    #[prost(string, tag = "9")]
    description: String,
    #[prost(string, repeated, tag = "12")]
    parents: Vec<String>,
}

/// Every build cache record of the engine at `socket`, from its `BuildKit`.
///
/// # Errors
/// When the engine does not upgrade the connection (no `BuildKit`, or
/// another engine on the socket), the call fails, or `timeout` passes.
pub(super) async fn build_cache(
    socket: &Path,
    timeout: Duration,
) -> Result<Vec<BuildCacheEntry>, String> {
    tokio::time::timeout(timeout, ask(socket.to_path_buf()))
        .await
        .map_err(|_| format!("BuildKit's DiskUsage timed out after {timeout:?}"))?
}

async fn ask(socket: PathBuf) -> Result<Vec<BuildCacheEntry>, String> {
    // The URI is not used: every connection is the upgraded socket.
    let channel = Endpoint::from_static("http://docker")
        .connect_with_connector(tower::service_fn(move |_| upgraded(socket.clone())))
        .await
        .map_err(|e| format!("BuildKit on the engine's socket: {e}"))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| format!("BuildKit on the engine's socket: {e}"))?;
    let answer: tonic::Response<DiskUsageResponse> = grpc
        .unary(
            Request::new(DiskUsageRequest::default()),
            PathAndQuery::from_static(DISK_USAGE),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .map_err(|e| format!("BuildKit DiskUsage: {}", e.message()))?;
    let mut entries: Vec<BuildCacheEntry> = answer
        .into_inner()
        .record
        .into_iter()
        .filter(|r| !r.id.is_empty())
        .map(|r| BuildCacheEntry {
            parents: {
                let mut all: Vec<String> = std::iter::once(r.parent)
                    .chain(r.parents)
                    .filter(|p| !p.is_empty())
                    .collect();
                all.sort();
                all.dedup();
                all
            },
            id: r.id,
            description: r.description,
            created: timestamp(r.created_at.as_ref()),
            last_used: timestamp(r.last_used_at.as_ref()),
            size: byte_size(r.size),
            in_use: r.in_use,
        })
        .collect();
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(entries)
}

/// A connection to the engine's socket, upgraded to HTTP/2 for `/grpc`.
async fn upgraded(
    socket: PathBuf,
) -> std::io::Result<hyper_util::rt::TokioIo<tokio::net::UnixStream>> {
    let mut stream = tokio::net::UnixStream::connect(&socket).await?;
    stream.write_all(UPGRADE).await?;
    // Byte by byte up to the end of the answer's head: what follows is
    // HTTP/2 for tonic to read.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_UPGRADE_ANSWER {
            return Err(std::io::Error::other("no end to the upgrade answer"));
        }
        let byte = stream.read_u8().await?;
        head.push(byte);
    }
    let status_line = String::from_utf8_lossy(&head);
    let status_line = status_line.lines().next().unwrap_or_default();
    if status_line.split_whitespace().nth(1) != Some("101") {
        return Err(std::io::Error::other(format!(
            "the engine did not upgrade /grpc: {status_line}"
        )));
    }
    Ok(hyper_util::rt::TokioIo::new(stream))
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn a_record_reads_the_fields_safeprune_uses_and_skips_the_rest() {
        // Fields 2 (Mutable), 5 (Parent), 8 (UsageCount), 10 (RecordType),
        // 11 (Shared) and 12 (Parents) are left to prost to skip.
        #[derive(Clone, PartialEq, prost::Message)]
        struct Full {
            #[prost(string, tag = "1")]
            id: String,
            #[prost(bool, tag = "2")]
            mutable: bool,
            #[prost(bool, tag = "3")]
            in_use: bool,
            #[prost(int64, tag = "4")]
            size: i64,
            #[prost(string, tag = "5")]
            parent: String,
            #[prost(message, optional, tag = "6")]
            created_at: Option<prost_types::Timestamp>,
            #[prost(message, optional, tag = "7")]
            last_used_at: Option<prost_types::Timestamp>,
            #[prost(int64, tag = "8")]
            usage_count: i64,
            #[prost(string, tag = "9")]
            description: String,
            #[prost(string, tag = "10")]
            record_type: String,
            #[prost(bool, tag = "11")]
            shared: bool,
            #[prost(string, repeated, tag = "12")]
            parents: Vec<String>,
        }
        let full = Full {
            id: "p7pvls5mii8ajxkkv9eqzw17s".into(),
            mutable: true,
            in_use: true,
            size: 4096,
            parent: "x".into(),
            created_at: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 5,
            }),
            last_used_at: None,
            usage_count: 3,
            description: "mount / from exec /bin/sh".into(),
            record_type: "exec.cachemount".into(),
            shared: true,
            parents: vec!["y".into()],
        };
        let read = UsageRecord::decode(full.encode_to_vec().as_slice()).unwrap();
        assert_eq!(read.id, full.id);
        assert!(read.in_use);
        assert_eq!(read.size, 4096);
        assert_eq!(read.description, full.description);
        assert_eq!(
            timestamp(read.created_at.as_ref()).map(|t| t.timestamp()),
            Some(1_700_000_000)
        );
        assert_eq!(timestamp(read.last_used_at.as_ref()), None);
    }
}
