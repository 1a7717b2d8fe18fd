//! Removals, one object at a time and never with force: Docker's refusals
//! read as in use or gone, and an image untagged only while no container
//! uses it.

use std::collections::{HashMap, HashSet};

use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    PruneBuildOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};

use super::convert::{self, real_refs};
use super::{DockerRuntime, status_code};
use crate::inventory::Image;
use crate::runtime::engine::{Removal, Target, failed};

impl DockerRuntime {
    /// Removes one object of `kind`: see `Engine::remove`.
    pub(super) async fn remove_one(&self, target: &Target) -> Removal {
        let id = target.id();
        let result = match target {
            Target::Container(_) => {
                let options = RemoveContainerOptionsBuilder::default()
                    .force(false)
                    .v(false)
                    .build();
                let removed = self.docker.remove_container(id, Some(options)).await;
                if removed.is_ok() || removed.as_ref().is_err_and(|e| status_code(e) == Some(404)) {
                    // Not the watch's lock: a removal must not wait out a
                    // re-check's read. The next sync applies it.
                    self.watch.removed(id);
                }
                removed
            }
            Target::Image(image) => return self.remove_image(image).await,
            Target::Volume(_) => {
                let options = RemoveVolumeOptionsBuilder::default().force(false).build();
                self.docker.remove_volume(id, Some(options)).await
            }
            Target::Network(_) => match self.docker.remove_network(id).await {
                // A network with endpoints (and a predefined one) is refused
                // with 403, not 409 (measured): in use, not a failure.
                Err(BollardError::DockerResponseServerError {
                    status_code: 403,
                    message,
                }) => return Removal::InUse(message),
                other => other,
            },
            Target::BuildCache(_) => return self.remove_build_cache(id).await,
        };
        match result {
            Ok(()) => Removal::Removed,
            Err(e) => removal_from_error(e),
        }
    }

    /// Removes an image without force.
    ///
    /// By id, Docker deletes an image whose references all name one
    /// repository with at most one tag (`app:1` and `app@sha256:…`) together
    /// with them, and refuses (409) while any container, running or
    /// stopped, uses it: one call, the check made by the engine itself.
    /// An image with more references is refused by id (409 "must be
    /// forced"), so it loses them one by one and the last untag deletes it.
    /// An untag succeeds even while a container uses the image; only the
    /// last one is refused (409, measured), which would leave the image
    /// stripped of all but one name. So first make sure, from the watch,
    /// that no container uses it.
    async fn remove_image(&self, image: &Image) -> Removal {
        // The names the re-check read: a tag moved since is checked before
        // each untag below.
        let refs: Vec<String> = image.tags.iter().chain(&image.digests).cloned().collect();
        let id = image.id.as_str();
        let options = || {
            RemoveImageOptionsBuilder::default()
                .force(false)
                .noprune(false)
                .build()
        };
        let by_tags = !convert::is_single_repository(&refs);
        if by_tags {
            let keys: HashSet<&str> = std::iter::once(id)
                .chain(refs.iter().map(String::as_str))
                .collect();
            match self.synced_watch().await {
                Ok(watch) => {
                    if let Some(user) = watch.users_of_images(&keys).first() {
                        return Removal::InUse(format!("image is used by container {}", user.id));
                    }
                }
                Err(e) => return failed(&e),
            }
            // The watch may have missed a container's create event (see
            // `Watch::forget`), and a lost name does not come back: the
            // engine's own list of the containers made from the image has
            // the last word, one call per image removed by its names.
            let made_from = HashMap::from([("ancestor", vec![id])]);
            match self.list_containers(&made_from).await {
                Ok(users) => {
                    if let Some(user) = users.first() {
                        return Removal::InUse(format!(
                            "image is used by container {}",
                            user.id.as_deref().unwrap_or("?")
                        ));
                    }
                }
                Err(e) => return failed(&e),
            }
            for reference in &refs {
                // A tag may have moved to another image since the re-check
                // (a pull of `app:latest`): untag only what still names
                // this one.
                match self.docker.inspect_image(reference).await {
                    Ok(now) if now.id.as_deref() == Some(id) => {}
                    Ok(_) => continue,
                    Err(e) if status_code(&e) == Some(404) => continue,
                    Err(e) => return removal_from_error(e),
                }
                match self
                    .docker
                    .remove_image(reference, Some(options()), None)
                    .await
                {
                    // 404: removing a tag may also drop the digest references
                    // of its repository.
                    Ok(_) => {}
                    Err(e) if status_code(&e) == Some(404) => {}
                    Err(e) => return removal_from_error(e),
                }
            }
            // The last untag normally deleted the image. If it is still
            // there (a child image holds it), delete it by id below, unless
            // it was tagged again meanwhile.
            match self.docker.inspect_image(id).await {
                Err(e) if status_code(&e) == Some(404) => return Removal::Removed,
                Err(e) => return removal_from_error(e),
                Ok(now) => {
                    let tags = real_refs(now.repo_tags.unwrap_or_default());
                    if !tags.is_empty() {
                        return Removal::InUse(format!(
                            "image was tagged again while being removed: {}",
                            tags.join(", ")
                        ));
                    }
                }
            }
        }
        match self.docker.remove_image(id, Some(options()), None).await {
            Ok(_) => Removal::Removed,
            // We untagged it and someone else deleted it meanwhile: removed.
            Err(e) if status_code(&e) == Some(404) && by_tags => Removal::Removed,
            Err(e) => removal_from_error(e),
        }
    }

    /// Removes one build cache record with `/build/prune`, the only way
    /// Docker offers.
    ///
    /// Its `id` filter is not an equality: `BuildKit` matches `id~=<value>`,
    /// so `p7pv` pruned `p7pvls5mii8ajxkkv9eqzw17s` (measured). We refuse an
    /// id that would match another record, and check what was pruned.
    async fn remove_build_cache(&self, id: &str) -> Removal {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Removal::Failed(format!("unexpected build cache id {id:?}"));
        }
        let records = match self.build_cache_records().await {
            Ok(records) => records,
            Err(e) => return Removal::Failed(e),
        };
        // A record missing from one listing is not trusted to be gone: a
        // listing taken while BuildKit prunes may leave records out
        // (measured: a chain's record reported gone, still there after).
        // The prune by id says, and the listing after it.
        let listed = records.iter().any(|r| r.id == id);
        if let Some(other) = records.iter().find(|r| r.id != id && r.id.contains(id)) {
            // Unlisted, it is no record but a piece of another's id, which
            // the prune's filter would match: gone, and nothing pruned.
            if !listed {
                return Removal::Gone;
            }
            return Removal::Failed(format!(
                "the prune filter for {id} would also match build cache record {}",
                other.id
            ));
        }
        let filters = HashMap::from([("id", vec![id])]);
        // `all`: without it BuildKit prunes only records it deems dangling.
        let options = PruneBuildOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let pruned = match self.docker.prune_build(Some(options)).await {
            Ok(response) => response.caches_deleted.unwrap_or_default(),
            Err(e) => return removal_from_error(e),
        };
        let others: Vec<&String> = pruned.iter().filter(|p| *p != id).collect();
        if !others.is_empty() {
            tracing::warn!(id, ?others, "build cache prune removed more than asked");
        }
        if pruned.iter().any(|p| p == id) {
            return Removal::Removed;
        }
        match self.build_cache_records().await {
            Ok(now) if now.iter().any(|r| r.id == id) => Removal::InUse(format!(
                "build cache record {id} was not pruned: in use or shared"
            )),
            Ok(_) => Removal::Gone,
            Err(e) => Removal::Failed(e),
        }
    }
}

/// 404 is gone, 409 is in use or changed, anything else failed.
fn removal_from_error(e: BollardError) -> Removal {
    match e {
        BollardError::DockerResponseServerError {
            status_code: 404, ..
        } => Removal::Gone,
        BollardError::DockerResponseServerError {
            status_code: 409,
            message,
        } => Removal::InUse(message),
        // With every cause: "docker read events failed" alone says nothing.
        other => failed(&other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_404_and_409_are_not_failures() {
        let server = |status_code, message: &str| BollardError::DockerResponseServerError {
            status_code,
            message: message.to_owned(),
        };
        assert_eq!(removal_from_error(server(404, "no such")), Removal::Gone);
        assert_eq!(
            removal_from_error(server(409, "in use")),
            Removal::InUse("in use".to_owned())
        );
        assert!(matches!(
            removal_from_error(server(500, "boom")),
            Removal::Failed(_)
        ));
    }
}
