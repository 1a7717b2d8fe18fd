//! Image uses as they happen, from containerd's events service:
//! what the daemon records between its cycles, since containerd keeps no
//! history of events to read later.
//!
//! A container's creation names its image; a task's start or exit names
//! only its container, whose record names the image. CRI's containers are
//! containerd containers of `k8s.io`: their events come the same way, and
//! CRI stores each under the image's full name. The name is resolved to
//! its target when the event comes, so a tag moved later does not move the
//! use.

use containerd_client::events::{ContainerCreate, TaskExit, TaskStart};
use containerd_client::tonic::Status;
use containerd_client::tonic::transport::Channel;
use containerd_client::types::Envelope;
use prost::Message;
use tokio::sync::mpsc;

use super::convert::{qualified, timestamp};
use super::native;
use super::watch::{BARRIER_TOPIC, subscribe_live, unique_nanos};
use crate::inventory::{Use, UseSource};

/// The topics that are a use of an image, and what use.
const TOPICS: [(&str, UseSource); 3] = [
    ("/containers/create", UseSource::ContainerCreate),
    ("/tasks/start", UseSource::ContainerStart),
    ("/tasks/exit", UseSource::ContainerExit),
];

/// What one event says: the container, its image's name when the event
/// gives it, and the use.
#[derive(Debug, PartialEq, Eq)]
struct Event {
    namespace: String,
    container: String,
    image: Option<String>,
    used: Use,
}

/// Follows the events of `namespaces` and sends each use as
/// `(image id, use)`, until the stream ends or `uses` is closed. The
/// stream goes over `stream_channel` (no deadline), the reads over
/// `channel`.
///
/// # Errors
/// The subscription fails or breaks (containerd stopped).
pub(super) async fn follow(
    stream_channel: &Channel,
    channel: &Channel,
    namespaces: &[String],
    uses: &mpsc::Sender<(String, Use)>,
) -> Result<(), Status> {
    let barrier_namespace = namespaces
        .first()
        .ok_or_else(|| Status::invalid_argument("no namespace to follow"))?;
    let filters = namespaces
        .iter()
        .flat_map(|n| {
            TOPICS
                .iter()
                .map(move |(topic, _)| format!("namespace=={n},topic==\"{topic}\""))
        })
        .chain([format!(
            "namespace=={barrier_namespace},topic==\"{BARRIER_TOPIC}\""
        )])
        .collect();
    let token_prefix = format!("uses-{}-{}", std::process::id(), unique_nanos());
    let mut events = subscribe_live(
        stream_channel,
        channel,
        filters,
        barrier_namespace,
        &token_prefix,
    )
    .await?;
    tracing::info!(namespaces = ?namespaces, "following containerd's events: image uses are recorded as they come");
    while let Some(envelope) = events.message().await? {
        let Some(event) = parse(&envelope) else {
            continue;
        };
        match image_id(channel, &event).await {
            Ok(Some(id)) => {
                if uses.send((id, event.used)).await.is_err() {
                    return Ok(());
                }
            }
            // A container or image gone since: nothing left to date.
            Ok(None) => {
                tracing::debug!(container = %event.container, "a use of an image no longer there");
            }
            Err(e) => {
                tracing::warn!(container = %event.container, error = %e, "cannot resolve the image of a container event: this use is not recorded");
            }
        }
    }
    Ok(())
}

/// The id of the image `event` used, as the inventory names it.
async fn image_id(channel: &Channel, event: &Event) -> Result<Option<String>, Status> {
    let ns = event.namespace.as_str();
    let name = match &event.image {
        Some(name) => name.clone(),
        None => match native::container(channel, ns, &event.container).await? {
            Some(container) => container.image,
            None => return Ok(None),
        },
    };
    if name.is_empty() {
        return Ok(None);
    }
    Ok(native::image(channel, ns, &name)
        .await?
        .and_then(|record| record.target)
        .filter(|target| !target.digest.is_empty())
        .map(|target| qualified(ns, &target.digest)))
}

/// The use one envelope tells of; `None` for any other event, or one
/// without a container or a time.
fn parse(envelope: &Envelope) -> Option<Event> {
    let source = TOPICS
        .iter()
        .find(|(topic, _)| *topic == envelope.topic)
        .map(|(_, source)| *source)?;
    let payload = envelope.event.as_ref()?.value.as_slice();
    let (container, image) = match source {
        UseSource::ContainerCreate => {
            let create = ContainerCreate::decode(payload).ok()?;
            (create.id, Some(create.image).filter(|i| !i.is_empty()))
        }
        UseSource::ContainerStart => (TaskStart::decode(payload).ok()?.container_id, None),
        _ => (TaskExit::decode(payload).ok()?.container_id, None),
    };
    if container.is_empty() {
        return None;
    }
    Some(Event {
        namespace: envelope.namespace.clone(),
        container,
        image,
        used: Use {
            at: timestamp(envelope.timestamp.as_ref())?,
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use prost_types::{Any, Timestamp};

    use super::*;

    fn envelope(topic: &str, payload: Vec<u8>) -> Envelope {
        Envelope {
            timestamp: Some(Timestamp {
                seconds: 1_790_000_000,
                nanos: 5,
            }),
            namespace: "k8s.io".to_owned(),
            topic: topic.to_owned(),
            event: Some(Any {
                type_url: String::new(),
                value: payload,
            }),
        }
    }

    fn used(source: UseSource) -> Use {
        Use {
            at: Utc.timestamp_opt(1_790_000_000, 5).unwrap(),
            source,
        }
    }

    #[test]
    fn creations_name_their_image_and_tasks_their_container() {
        let create = ContainerCreate {
            id: "c1".into(),
            image: "docker.io/library/app:1".into(),
            runtime: None,
        };
        assert_eq!(
            parse(&envelope("/containers/create", create.encode_to_vec())),
            Some(Event {
                namespace: "k8s.io".into(),
                container: "c1".into(),
                image: Some("docker.io/library/app:1".into()),
                used: used(UseSource::ContainerCreate),
            })
        );
        let start = TaskStart {
            container_id: "c2".into(),
            pid: 7,
        };
        let exit = TaskExit {
            container_id: "c3".into(),
            ..TaskExit::default()
        };
        for (topic, payload, container, source) in [
            (
                "/tasks/start",
                start.encode_to_vec(),
                "c2",
                UseSource::ContainerStart,
            ),
            (
                "/tasks/exit",
                exit.encode_to_vec(),
                "c3",
                UseSource::ContainerExit,
            ),
        ] {
            let event = parse(&envelope(topic, payload)).unwrap();
            assert_eq!(
                (event.container.as_str(), event.image, event.used),
                (container, None, used(source))
            );
        }
    }

    #[test]
    fn other_events_and_empty_ones_are_no_use() {
        let start = TaskStart {
            container_id: "c2".into(),
            pid: 7,
        };
        assert_eq!(
            parse(&envelope("/tasks/delete", start.encode_to_vec())),
            None
        );
        assert_eq!(parse(&envelope("/tasks/start", Vec::new())), None);
        assert_eq!(parse(&envelope("/tasks/start", vec![0xff, 0xff])), None);
        let mut untimed = envelope("/tasks/start", start.encode_to_vec());
        untimed.timestamp = None;
        assert_eq!(parse(&untimed), None);
    }
}
