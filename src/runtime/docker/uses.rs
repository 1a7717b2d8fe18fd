//! Image uses from dockerd's container events: read from its
//! short event history by `plan` and `run`, and followed live by the
//! daemon between its cycles.
//!
//! A `create`, `start` or `die` event of a container names the image as
//! its creator did (`image` attribute: a tag, a digest reference or an
//! id). What follows the stream resolves it to the image's id when the
//! event comes, through the container (its `Image` is the id it was made
//! from, whatever tag moved since), or, for a container already gone,
//! through the name.

use bollard::Docker;
use bollard::models::EventMessage;
use bollard::query_parameters::EventsOptionsBuilder;
use futures_util::StreamExt;
use std::collections::HashMap;
use tokio::sync::mpsc;

use crate::inventory::{Use, UseSource};

/// The container events that are a use of its image.
pub(super) const ACTIONS: [&str; 3] = ["create", "start", "die"];

/// One use an event tells of.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Event {
    pub container: String,
    /// As the container's creator named it.
    pub image: String,
    pub used: Use,
}

/// The use `event` tells of; `None` for any other event, or one without
/// an image or a time.
pub(super) fn parse(event: EventMessage) -> Option<Event> {
    let source = match event.action.as_deref()? {
        "create" => UseSource::ContainerCreate,
        "start" => UseSource::ContainerStart,
        "die" => UseSource::ContainerExit,
        _ => return None,
    };
    let actor = event.actor?;
    let image = actor
        .attributes?
        .remove("image")
        .filter(|i| !i.is_empty())?;
    Some(Event {
        container: actor.id.unwrap_or_default(),
        image,
        used: Use {
            at: chrono::DateTime::from_timestamp_nanos(event.time_nano?),
            source,
        },
    })
}

/// The event filter for [`ACTIONS`].
pub(super) fn filters() -> HashMap<&'static str, Vec<&'static str>> {
    HashMap::from([("type", vec!["container"]), ("event", ACTIONS.to_vec())])
}

/// Follows dockerd's container events from now on and sends each use as
/// `(image id, use)`, until the stream ends or `uses` is closed.
///
/// # Errors
/// The stream cannot be opened or breaks (dockerd stopped).
pub(super) async fn follow(
    docker: &Docker,
    uses: &mpsc::Sender<(String, Use)>,
) -> Result<(), bollard::errors::Error> {
    let filters = filters();
    // From now on, whenever dockerd takes the request: it answers from its
    // history what came meanwhile.
    let since = super::watch::api_time(std::time::SystemTime::now());
    let options = EventsOptionsBuilder::default()
        .since(&since)
        .filters(&filters)
        .build();
    let mut events = docker.events(Some(options));
    tracing::info!("following docker's events: image uses are recorded as they come");
    while let Some(event) = events.next().await {
        let Some(event) = parse(event?) else {
            continue;
        };
        match image_id(docker, &event).await {
            Some(id) => {
                if uses.send((id, event.used)).await.is_err() {
                    return Ok(());
                }
            }
            None => {
                tracing::debug!(container = %event.container, image = %event.image, "a use of an image no longer there");
            }
        }
    }
    Ok(())
}

/// The id of the image `event` used: the container's image, else what the
/// name the creator gave resolves to now.
async fn image_id(docker: &Docker, event: &Event) -> Option<String> {
    if !event.container.is_empty()
        && let Ok(container) = docker.inspect_container(&event.container, None).await
        && let Some(id) = container.image.filter(|i| !i.is_empty())
    {
        return Some(id);
    }
    docker
        .inspect_image(&event.image)
        .await
        .ok()?
        .id
        .filter(|i| !i.is_empty())
}

#[cfg(test)]
mod tests {
    use bollard::models::{EventActor, EventMessageTypeEnum};
    use chrono::TimeZone;

    use super::*;

    fn event(action: &str, image: Option<&str>, time_nano: Option<i64>) -> EventMessage {
        EventMessage {
            typ: Some(EventMessageTypeEnum::CONTAINER),
            action: Some(action.to_owned()),
            actor: Some(EventActor {
                id: Some("c1".to_owned()),
                attributes: Some(
                    image
                        .map(|i| HashMap::from([("image".to_owned(), i.to_owned())]))
                        .unwrap_or_default(),
                ),
            }),
            time_nano,
            ..EventMessage::default()
        }
    }

    #[test]
    fn creations_starts_and_deaths_are_uses_of_the_image_named() {
        let at = chrono::Utc.timestamp_opt(1_790_000_000, 7).unwrap();
        for (action, source) in [
            ("create", UseSource::ContainerCreate),
            ("start", UseSource::ContainerStart),
            ("die", UseSource::ContainerExit),
        ] {
            assert_eq!(
                parse(event(
                    action,
                    Some("app:1"),
                    Some(1_790_000_000_000_000_007)
                )),
                Some(Event {
                    container: "c1".into(),
                    image: "app:1".into(),
                    used: Use { at, source },
                })
            );
        }
        for nothing in [
            event("destroy", Some("app:1"), Some(1)),
            event("start", None, Some(1)),
            event("start", Some(""), Some(1)),
            event("start", Some("app:1"), None),
        ] {
            assert_eq!(parse(nothing), None);
        }
    }
}
