//! What each image of one namespace holds on disk, resource by resource:
//! its content blobs, reached from its target through containerd's GC
//! labels (index to manifests, manifest to config and layers), and the
//! unpacked snapshots of its layers (a reached blob's
//! `containerd.io/gc.ref.snapshot.<snapshotter>` label names the top one,
//! and each snapshot its parent). For `plan --compare docker-prune` on
//! Docker's containerd image store, where what the command frees is what
//! only the images it removes hold: a layer two images share is freed once,
//! and not at all while an image that stays holds it.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use futures_util::{StreamExt, stream};

use super::{self as native, reachable};
use crate::inventory::ImageHolds;
use crate::output::Chain;
use crate::runtime::grpc::{CONNECT_TIMEOUT, channel};

/// The label by which containerd's garbage collector follows a blob to the
/// snapshot unpacked from it, the snapshotter's name after it.
const LABEL_GC_SNAPSHOT: &str = "containerd.io/gc.ref.snapshot.";

/// How many snapshot sizes are asked at once.
const USAGE_CALLS: usize = 8;

/// What each image of `targets` (its target digest, Docker's image id on
/// the containerd store) holds in `namespace` of the containerd at
/// `socket`, with `snapshotter`'s snapshots. A target not in the content
/// store is left out (counted whole by the caller).
///
/// # Errors
/// containerd cannot be reached, or does not list its content or
/// snapshots: why, in words.
pub(crate) async fn image_holds(
    socket: &Path,
    namespace: &str,
    snapshotter: &str,
    targets: &[&str],
) -> Result<ImageHolds, String> {
    let at = socket.display();
    let channel = tokio::time::timeout(CONNECT_TIMEOUT, channel(socket).connect())
        .await
        .map_err(|_| format!("containerd at {at} gave no answer within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot connect to containerd at {at}: {}", Chain(&e)))?;
    let (content, parents) = tokio::try_join!(
        native::content(&channel, namespace),
        native::snapshot_parents(&channel, namespace, snapshotter),
    )
    .map_err(|e| format!("containerd at {at} does not list its content or snapshots: {e}"))?;
    let label = format!("{LABEL_GC_SNAPSHOT}{snapshotter}");
    let mut blobs_of: HashMap<&str, Vec<(String, u64)>> = HashMap::new();
    let mut snapshots_of: HashMap<&str, BTreeSet<String>> = HashMap::new();
    for target in targets {
        if !content.contains_key(*target) {
            continue;
        }
        let blobs = reachable(target, &content);
        let mut snapshots = BTreeSet::new();
        let tops = blobs
            .keys()
            .filter_map(|digest| content.get(*digest)?.labels.get(&label));
        for top in tops {
            let mut key = top.as_str();
            while !key.is_empty() && snapshots.insert(key.to_owned()) {
                key = parents.get(key).map_or("", String::as_str);
            }
        }
        blobs_of.insert(
            target,
            blobs
                .into_iter()
                .map(|(digest, bytes)| (format!("blob {digest}"), bytes))
                .collect(),
        );
        snapshots_of.insert(target, snapshots);
    }
    // One usage call per snapshot, however many images share it.
    let every: BTreeSet<&String> = snapshots_of.values().flatten().collect();
    let sizes: HashMap<&String, u64> = stream::iter(every)
        .map(|key| {
            let channel = channel.clone();
            let at = &at;
            async move {
                let size = native::snapshot_usage(&channel, namespace, snapshotter, key)
                    .await
                    .map_err(|e| format!("containerd at {at} does not size snapshot {key}: {e}"))?;
                Ok::<_, String>((key, size.unwrap_or(0)))
            }
        })
        .buffer_unordered(USAGE_CALLS)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    Ok(ImageHolds(
        blobs_of
            .into_iter()
            .map(|(target, mut resources)| {
                resources.extend(snapshots_of[target].iter().map(|key| {
                    (
                        format!("snapshot {key}"),
                        sizes.get(key).copied().unwrap_or(0),
                    )
                }));
                (target.to_owned(), resources)
            })
            .collect(),
    ))
}
