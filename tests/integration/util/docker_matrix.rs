//! One Docker test on each engine a node may run: Debian 12's Docker
//! 20.10 and Docker 29 on each of its image stores.
//!
//! [`DockerVersion`] names the three; [`VersionedDockerd::start`] starts a
//! private engine of that version and store: a [`PrivateDockerd`] for
//! 20.10, a [`PrivateDockerd29`] for 29 (from `$SAFEPRUNE_TEST_RUNTIMES`;
//! where it is unset the start is [`Skipped`]). Either way the result
//! dereferences to a [`PrivateDockerd`], so a test body is written once
//! against the fixtures of `docker.rs`. [`docker_tests!`] makes of that
//! body the tests `<name>::on_20_10`, `<name>::on_29_overlay2` and
//! `<name>::on_29_containerd`, as `containerd_tests!` does for containerd's
//! releases.
//!
//! Where the engines truly differ (docs/engines.md, "Docker 29"), the body
//! branches on the [`DockerVersion`] it is given and says which measured
//! fact it follows.

use std::ops::Deref;
use std::path::PathBuf;

use super::Skipped;
use super::docker::PrivateDockerd;
use super::docker29::{PrivateDockerd29, Store};

/// The Docker Engine, and for 29 the image store, a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DockerVersion {
    /// Debian 12's Docker 20.10.24 (API 1.41; package `docker.io`), on
    /// the overlay2 graph driver: what [`PrivateDockerd::start`] runs.
    V20_10,
    /// Docker 29.7.2 (API 1.55) over containerd 2.3.4 on `store`.
    V29(Store),
}

impl DockerVersion {
    /// Whether images live in containerd's image store: ids are manifest
    /// or index digests, a parent image holds nothing, inspect's `Size`
    /// is the compressed content (docs/engines.md, "Docker 29").
    pub fn containerd_store(self) -> bool {
        self == Self::V29(Store::Containerd)
    }
}

/// A private Docker Engine of the [`DockerVersion`] a test asked for; a
/// [`PrivateDockerd`] by [`Deref`].
pub enum VersionedDockerd {
    V20_10(PrivateDockerd),
    V29(PrivateDockerd29),
}

impl VersionedDockerd {
    /// Starts a private engine of `version`, and waits until it answers.
    ///
    /// ```ignore
    /// let Some(engine) = VersionedDockerd::start(version).await.or_skip() else {
    ///     return; // printed: "skipped: SAFEPRUNE_TEST_RUNTIMES is unset ..."
    /// };
    /// ```
    ///
    /// # Errors
    /// [`Skipped`] for Docker 29 when `$SAFEPRUNE_TEST_RUNTIMES` is unset.
    ///
    /// # Panics
    /// As [`PrivateDockerd::start`] and [`PrivateDockerd29::start`].
    pub async fn start(version: DockerVersion) -> Result<Self, Skipped> {
        Ok(match version {
            DockerVersion::V20_10 => Self::V20_10(PrivateDockerd::start().await),
            DockerVersion::V29(store) => Self::V29(PrivateDockerd29::start(store).await?),
        })
    }

    /// [`Self::start`], with the images on a fresh ext4 file system of
    /// `megabytes` (see [`Self::image_root`]): a disk the test can fill.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn start_on_small_fs(
        version: DockerVersion,
        megabytes: u64,
    ) -> Result<Self, Skipped> {
        Ok(match version {
            DockerVersion::V20_10 => {
                Self::V20_10(PrivateDockerd::start_on_small_fs(megabytes).await)
            }
            DockerVersion::V29(store) => {
                Self::V29(PrivateDockerd29::start_on_small_fs(store, megabytes).await?)
            }
        })
    }

    /// Where the engine keeps its images, as safeprune measures it with
    /// `images.disk`: the data root, but on Docker 29's containerd store
    /// containerd's snapshotter root. Under [`Self::start_on_small_fs`] it
    /// lies on the small file system.
    pub fn image_root(&self) -> PathBuf {
        match self {
            Self::V20_10(e) => e.data_root(),
            Self::V29(e) => e.image_root(),
        }
    }

    /// Kills the engine (on 29, its containerd too), as a crash or
    /// `systemctl stop docker` would; its data stays for [`Self::restart`].
    pub fn stop(&mut self) {
        match self {
            Self::V20_10(e) => e.stop(),
            Self::V29(e) => e.stop(),
        }
    }

    /// Starts the engine again on the same data, socket and scope.
    pub async fn restart(&mut self) {
        match self {
            Self::V20_10(e) => e.restart().await,
            Self::V29(e) => e.restart().await,
        }
    }

    /// The version and store it runs.
    pub fn version(&self) -> DockerVersion {
        match self {
            Self::V20_10(_) => DockerVersion::V20_10,
            Self::V29(e) => DockerVersion::V29(e.store()),
        }
    }

    /// The Docker 29 engine, for what only it has (its containerd, `ctr`).
    pub fn as_29(&self) -> Option<&PrivateDockerd29> {
        match self {
            Self::V20_10(_) => None,
            Self::V29(e) => Some(e),
        }
    }
}

impl Deref for VersionedDockerd {
    type Target = PrivateDockerd;

    fn deref(&self) -> &PrivateDockerd {
        match self {
            Self::V20_10(e) => e,
            Self::V29(e) => e,
        }
    }
}

/// One test per Docker engine from one test body. For each `name`, an
/// `async fn name(version: DockerVersion)` of the calling module, it makes
/// a module `name` of three tests: `on_20_10` runs the body on Debian's
/// Docker 20.10, `on_29_overlay2` and `on_29_containerd` on Docker 29 with
/// each image store. The body starts its engine with
/// [`VersionedDockerd::start`]`(version)` and `.or_skip()`, so that without
/// `$SAFEPRUNE_TEST_RUNTIMES` the Docker 29 tests print why and pass
/// without running.
///
/// A name may carry the test attribute its body needs; the default is
/// `#[tokio::test]`:
///
/// ```ignore
/// docker_tests! {
///     inventory_reads_pods,
///     #[tokio::test(flavor = "multi_thread")]
///     plan_then_run,
/// }
/// ```
#[allow(
    unused_macros,
    reason = "benches/containerd.rs includes this harness and runs no Docker"
)]
macro_rules! docker_tests {
    () => {};
    (#[$test:meta] $name:ident $(, $($rest:tt)*)?) => {
        mod $name {
            use $crate::util::docker29::Store;
            use $crate::util::docker_matrix::DockerVersion;

            #[$test]
            async fn on_20_10() {
                super::$name(DockerVersion::V20_10).await;
            }

            #[$test]
            async fn on_29_overlay2() {
                super::$name(DockerVersion::V29(Store::Overlay2)).await;
            }

            #[$test]
            async fn on_29_containerd() {
                super::$name(DockerVersion::V29(Store::Containerd)).await;
            }
        }
        $($crate::util::docker_matrix::docker_tests! { $($rest)* })?
    };
    ($name:ident $(, $($rest:tt)*)?) => {
        $crate::util::docker_matrix::docker_tests! { #[tokio::test] $name $(, $($rest)*)? }
    };
}
#[allow(
    unused_imports,
    reason = "benches/containerd.rs includes this harness and runs no Docker"
)]
pub(crate) use docker_tests;
