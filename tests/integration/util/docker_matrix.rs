//! One Docker test on each engine a node may run: Debian 12's Docker
//! 20.10 and Docker 28+ (Debian unstable's) on each of its image stores.
//!
//! [`DockerVersion`] names the three; [`VersionedDockerd::start`] starts a
//! private engine of that version and store: a [`PrivateDockerd`] for
//! 20.10, a [`PrivateDockerd28`] for 28+ (from `$SAFEPRUNE_TEST_RUNTIMES`;
//! where they are not, the start is [`Missing`] and the test fails). Either way the result
//! dereferences to a [`PrivateDockerd`], so a test body is written once
//! against the fixtures of `docker.rs`. [`docker_tests!`] makes of that
//! body the tests `<name>::on_20_10`, `<name>::on_28_overlay2` and
//! `<name>::on_28_containerd`, as `containerd_tests!` does for containerd's
//! releases.
//!
//! Where the engines truly differ (docs/engines.md, "Docker 29"), the body
//! branches on the [`DockerVersion`] it is given and says which measured
//! fact it follows.

use std::ops::Deref;
use std::path::PathBuf;

use super::Missing;
use super::docker::PrivateDockerd;
use super::docker28::{PrivateDockerd28, Store};

/// The Docker Engine, and for 28+ the image store, a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DockerVersion {
    /// Debian 12's Docker 20.10.24 (API 1.41; package `docker.io`), on
    /// the overlay2 graph driver: what [`PrivateDockerd::start`] runs.
    V20_10,
    /// Debian unstable's Docker 28 or later (28.5.2, API 1.51, when this
    /// was written) over its containerd 2.x on `store`.
    V28(Store),
}

impl DockerVersion {
    /// Whether images live in containerd's image store: ids are manifest
    /// or index digests, a parent image holds nothing, inspect's `Size`
    /// is the compressed content (docs/engines.md, "Docker 29").
    pub fn containerd_store(self) -> bool {
        self == Self::V28(Store::Containerd)
    }
}

/// A private Docker Engine of the [`DockerVersion`] a test asked for; a
/// [`PrivateDockerd`] by [`Deref`].
pub enum VersionedDockerd {
    V20_10(PrivateDockerd),
    V28(PrivateDockerd28),
}

impl VersionedDockerd {
    /// Starts a private engine of `version`, and waits until it answers.
    ///
    /// ```ignore
    /// let engine = VersionedDockerd::start(version).await.required();
    /// ```
    ///
    /// # Errors
    /// [`Missing`] for Docker 28+ when `$SAFEPRUNE_TEST_RUNTIMES` is unset.
    ///
    /// # Panics
    /// As [`PrivateDockerd::start`] and [`PrivateDockerd28::start`].
    pub async fn start(version: DockerVersion) -> Result<Self, Missing> {
        Ok(match version {
            DockerVersion::V20_10 => Self::V20_10(PrivateDockerd::start().await),
            DockerVersion::V28(store) => Self::V28(PrivateDockerd28::start(store).await?),
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
    ) -> Result<Self, Missing> {
        Ok(match version {
            DockerVersion::V20_10 => {
                Self::V20_10(PrivateDockerd::start_on_small_fs(megabytes).await)
            }
            DockerVersion::V28(store) => {
                Self::V28(PrivateDockerd28::start_on_small_fs(store, megabytes).await?)
            }
        })
    }

    /// Where the engine keeps its images, as safeprune measures it with
    /// `images.disk`: the data root, but on Docker 28+'s containerd store
    /// containerd's snapshotter root. Under [`Self::start_on_small_fs`] it
    /// lies on the small file system.
    pub fn image_root(&self) -> PathBuf {
        match self {
            Self::V20_10(e) => e.data_root(),
            Self::V28(e) => e.image_root(),
        }
    }

    /// Kills the engine (on 28+, its containerd too), as a crash or
    /// `systemctl stop docker` would; its data stays for [`Self::restart`].
    pub fn stop(&mut self) {
        match self {
            Self::V20_10(e) => e.stop(),
            Self::V28(e) => e.stop(),
        }
    }

    /// Starts the engine again on the same data, socket and scope.
    pub async fn restart(&mut self) {
        match self {
            Self::V20_10(e) => e.restart().await,
            Self::V28(e) => e.restart().await,
        }
    }

    /// The version and store it runs.
    pub fn version(&self) -> DockerVersion {
        match self {
            Self::V20_10(_) => DockerVersion::V20_10,
            Self::V28(e) => DockerVersion::V28(e.store()),
        }
    }

    /// The Docker 28+ engine, for what only it has (its containerd, `ctr`).
    pub fn as_28(&self) -> Option<&PrivateDockerd28> {
        match self {
            Self::V20_10(_) => None,
            Self::V28(e) => Some(e),
        }
    }
}

impl Deref for VersionedDockerd {
    type Target = PrivateDockerd;

    fn deref(&self) -> &PrivateDockerd {
        match self {
            Self::V20_10(e) => e,
            Self::V28(e) => e,
        }
    }
}

/// One test per Docker engine from one test body. For each `name`, an
/// `async fn name(version: DockerVersion)` of the calling module, it makes
/// a module `name` of three tests: `on_20_10` runs the body on Debian's
/// Docker 20.10, `on_28_overlay2` and `on_28_containerd` on Docker 28+ with
/// each image store. The body starts its engine with
/// [`VersionedDockerd::start`]`(version)` and `.required()`, so that
/// without the runtimes the Docker 28+ tests fail saying how to fetch them.
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
    reason = "benches/speed/containerd.rs includes this harness and runs no Docker"
)]
macro_rules! docker_tests {
    () => {};
    (#[$test:meta] $name:ident $(, $($rest:tt)*)?) => {
        mod $name {
            use $crate::util::docker28::Store;
            use $crate::util::docker_matrix::DockerVersion;

            #[$test]
            async fn on_20_10() {
                super::$name(DockerVersion::V20_10).await;
            }

            #[$test]
            async fn on_28_overlay2() {
                super::$name(DockerVersion::V28(Store::Overlay2)).await;
            }

            #[$test]
            async fn on_28_containerd() {
                super::$name(DockerVersion::V28(Store::Containerd)).await;
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
    reason = "benches/speed/containerd.rs includes this harness and runs no Docker"
)]
pub(crate) use docker_tests;
