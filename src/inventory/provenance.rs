//! Whether an image's names can come back: the evidence a runtime keeps of
//! where an image's content was pulled from, and what it says of each name.
//!
//! A removed image a registry still serves costs a pull; one loaded,
//! imported, built or committed on the node is gone for good, and the next
//! pod that names it waits in `ImagePullBackOff`. The adapters read the
//! evidence (Docker's repo digests, containerd's distribution-source
//! labels) into a [`Provenance`]; [`Provenance::of`] says, per name,
//! whether a registry can give it back. docs/engines.md holds what each
//! runtime keeps, and the release it was seen on.

use std::borrow::Cow;

use serde::Serialize;

use super::refs;

/// The prefix of the label a containerd pull writes on every blob it
/// fetches: `containerd.io/distribution.source.<host>=<repository>[,…]`,
/// the host without its port.
pub const DISTRIBUTION_SOURCE: &str = "containerd.io/distribution.source.";

/// What a runtime's evidence says of where an image came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
pub enum Provenance {
    /// The runtime keeps no evidence safeprune can trust, and why (most
    /// often a fixed sentence: every image of a node shares it, and cloning
    /// it costs nothing). Every name then counts as one that can come back.
    Unknown { why: Cow<'static, str> },
    /// The pulls the runtime recorded (none for an image loaded, imported,
    /// built or committed here), and what it was asked for them.
    Pulled {
        from: Vec<PullSource>,
        /// The evidence looked at, for a person reading its absence:
        /// `repo digests`, `distribution-source labels`.
        looked_at: String,
    },
}

impl Default for Provenance {
    fn default() -> Self {
        Self::Unknown {
            why: Cow::Borrowed("the runtime does not say"),
        }
    }
}

/// One registry repository an image's content was pulled from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullSource {
    /// The registry's host, as the evidence names it: with its port where
    /// the evidence keeps one (a repo digest), without where it does not
    /// (containerd's label key).
    pub registry: String,
    /// Whether the evidence drops the port: a name on any port of the host
    /// then matches.
    pub port_dropped: bool,
    /// The repository's path on the registry (`library/busybox`).
    pub repository: String,
    /// The evidence as the runtime shows it.
    pub seen: String,
}

impl PullSource {
    /// The source a repo digest names (`127.0.0.1:5000/acc/bb@sha256:…`,
    /// `busybox@sha256:…`); `None` for anything else.
    #[must_use]
    pub fn from_repo_digest(reference: &str) -> Option<Self> {
        if !refs::is_digest(reference) {
            return None;
        }
        let (registry, repository) = locate(reference)?;
        Some(Self {
            registry,
            port_dropped: false,
            repository,
            seen: reference.to_owned(),
        })
    }

    /// The sources a containerd distribution-source label names: its key
    /// ends with the host, its value lists repositories, comma-separated.
    /// Nothing for another label.
    #[must_use]
    pub fn from_label(key: &str, value: &str) -> Vec<Self> {
        let Some(host) = key.strip_prefix(DISTRIBUTION_SOURCE) else {
            return Vec::new();
        };
        if host.is_empty() {
            return Vec::new();
        }
        value
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(|repository| Self {
                registry: host.to_owned(),
                port_dropped: true,
                repository: repository.to_owned(),
                seen: format!("{key}={value}"),
            })
            .collect()
    }

    /// Whether a name on `registry` (`host[:port]`) and `repository` is
    /// this source.
    fn serves(&self, registry: &str, repository: &str) -> bool {
        let registry = if self.port_dropped {
            host_of(registry)
        } else {
            registry
        };
        self.registry == registry && self.repository == repository
    }
}

/// What the evidence says of one name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comeback<'a> {
    /// Pulled under its own registry and repository: this source.
    Yes(&'a PullSource),
    /// No pull under its registry and repository is recorded.
    No,
    /// The runtime cannot tell (why): counted as can come back.
    Unknown(&'a str),
}

impl Provenance {
    /// From evidence read as repo digests (Docker's classic store).
    #[must_use]
    pub fn from_repo_digests<'a>(digests: impl IntoIterator<Item = &'a String>) -> Self {
        Self::Pulled {
            from: digests
                .into_iter()
                .filter_map(|d| PullSource::from_repo_digest(d))
                .collect(),
            looked_at: "repo digests".to_owned(),
        }
    }

    /// From the labels of an image's content (containerd): every
    /// distribution-source label, each source once.
    #[must_use]
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut from: Vec<PullSource> = labels
            .into_iter()
            .flat_map(|(k, v)| PullSource::from_label(k, v))
            .collect();
        from.sort_by(|a, b| (&a.registry, &a.repository).cmp(&(&b.registry, &b.repository)));
        from.dedup_by(|a, b| a.registry == b.registry && a.repository == b.repository);
        Self::Pulled {
            from,
            looked_at: "distribution-source labels".to_owned(),
        }
    }

    /// Whether `name` (a tag or digest reference, in any spelling) can
    /// come back: pulled from its own registry and repository. A name that
    /// cannot be parsed as a reference counts as one that cannot.
    #[must_use]
    pub fn of(&self, name: &str) -> Comeback<'_> {
        match self {
            Self::Unknown { why } => Comeback::Unknown(why.as_ref()),
            Self::Pulled { from, .. } => match locate(name) {
                Some((registry, repository)) => from
                    .iter()
                    .find(|s| s.serves(&registry, &repository))
                    .map_or(Comeback::No, Comeback::Yes),
                None => Comeback::No,
            },
        }
    }

    /// The names of `names` that cannot come back, in order.
    pub fn lost<'n>(&self, names: impl IntoIterator<Item = &'n String>) -> Vec<&'n str> {
        names
            .into_iter()
            .filter(|n| self.of(n) == Comeback::No)
            .map(String::as_str)
            .collect()
    }

    /// What `explain` says of it: the evidence seen, or its absence, or
    /// why the runtime cannot tell.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Unknown { why } => {
                format!("unknown ({why}): every name counts as one that can come back")
            }
            Self::Pulled { from, looked_at } if from.is_empty() => {
                format!("none: no pull recorded in its {looked_at}")
            }
            Self::Pulled { from, .. } => {
                let mut seen: Vec<&str> = from.iter().map(|s| s.seen.as_str()).collect();
                seen.dedup();
                seen.join(", ")
            }
        }
    }
}

/// A name's registry host (with its port, if any) and repository path, in
/// the fullest spelling: `busybox:1` is (`docker.io`, `library/busybox`),
/// `127.0.0.1:5000/a/b:2` is (`127.0.0.1:5000`, `a/b`). `None` when the
/// name has no path after its host.
fn locate(name: &str) -> Option<(String, String)> {
    let full = refs::fullest(name);
    let (registry, path) = refs::repository(&full).split_once('/')?;
    (!registry.is_empty() && !path.is_empty()).then(|| (registry.to_owned(), path.to_owned()))
}

/// `host` without its port: `127.0.0.1:5000` is `127.0.0.1`, `[::1]:5000`
/// is `::1`, as containerd writes the host into its label key.
fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(host, _)| host);
    }
    match registry.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => registry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    #[test]
    fn a_repo_digest_brings_back_the_names_of_its_own_repository_only() {
        let digests = names(&[&format!("127.0.0.1:5055/acc/bb@{DIGEST}")]);
        let p = Provenance::from_repo_digests(&digests);
        assert!(
            matches!(p.of("127.0.0.1:5055/acc/bb:2"), Comeback::Yes(s) if s.seen == digests[0])
        );
        assert!(matches!(p.of(&digests[0]), Comeback::Yes(_)));
        // A tag given here, another port, another host: no pull recorded.
        assert_eq!(p.of("app:1"), Comeback::No);
        assert_eq!(p.of("127.0.0.1:5056/acc/bb:2"), Comeback::No);
        assert_eq!(p.of("localhost:5055/acc/bb:2"), Comeback::No);
        assert_eq!(
            p.lost(&names(&["127.0.0.1:5055/acc/bb:2", "app:1", "acc/bb:2"])),
            ["app:1", "acc/bb:2"]
        );
    }

    #[test]
    fn docker_hub_names_match_in_every_spelling() {
        let p = Provenance::from_repo_digests(&names(&[&format!("busybox@{DIGEST}")]));
        for name in [
            "busybox:1",
            "library/busybox:1",
            "docker.io/library/busybox:1",
        ] {
            assert!(matches!(p.of(name), Comeback::Yes(_)), "{name}");
        }
        assert_eq!(p.of("acc/busybox:1"), Comeback::No);
    }

    #[test]
    fn a_distribution_source_label_drops_the_port_and_may_list_repositories() {
        let key = format!("{DISTRIBUTION_SOURCE}127.0.0.1");
        let value = "acc/bb,acc/cc".to_owned();
        let unrelated = ("io.cri-containerd.pinned".to_owned(), "pinned".to_owned());
        let p = Provenance::from_labels([(&key, &value), (&unrelated.0, &unrelated.1)]);
        for name in [
            "127.0.0.1:5055/acc/bb:2",
            "127.0.0.1:6000/acc/cc:1",
            "127.0.0.1/acc/bb:1",
        ] {
            assert!(matches!(p.of(name), Comeback::Yes(_)), "{name}");
        }
        // The content an archive imported under a new name shares with a
        // pulled image carries the pulled one's label: the new name is lost.
        assert_eq!(p.of("127.0.0.1:5055/acc/imported:1"), Comeback::No);
        assert_eq!(p.of("docker.io/acc/bb:2"), Comeback::No);
    }

    #[test]
    fn docker_hubs_label_names_library_repositories() {
        let key = format!("{DISTRIBUTION_SOURCE}docker.io");
        let value = "library/busybox".to_owned();
        let p = Provenance::from_labels([(&key, &value)]);
        assert!(matches!(p.of("busybox:1.36"), Comeback::Yes(_)));
        assert!(matches!(
            p.of("docker.io/library/busybox:1.36"),
            Comeback::Yes(_)
        ));
    }

    #[test]
    fn no_evidence_loses_every_name_and_says_what_was_looked_at() {
        let p = Provenance::from_repo_digests(&[]);
        assert_eq!(p.lost(&names(&["app:1", "app@sha256:ab"])).len(), 2);
        assert_eq!(p.describe(), "none: no pull recorded in its repo digests");
        let key = format!("{DISTRIBUTION_SOURCE}127.0.0.1");
        let value = "acc/bb".to_owned();
        let pulled = Provenance::from_labels([(&key, &value)]);
        assert_eq!(
            pulled.describe(),
            "containerd.io/distribution.source.127.0.0.1=acc/bb"
        );
    }

    #[test]
    fn an_unknown_fact_loses_nothing() {
        let p = Provenance::Unknown {
            why: "through CRI alone".into(),
        };
        assert_eq!(p.of("app:1"), Comeback::Unknown("through CRI alone"));
        assert!(p.lost(&names(&["app:1"])).is_empty());
        assert_eq!(
            Provenance::default(),
            Provenance::Unknown {
                why: "the runtime does not say".into()
            }
        );
    }

    #[test]
    fn a_label_of_no_host_or_no_repository_is_no_evidence() {
        assert!(PullSource::from_label(DISTRIBUTION_SOURCE, "acc/bb").is_empty());
        let key = format!("{DISTRIBUTION_SOURCE}127.0.0.1");
        assert!(PullSource::from_label(&key, ",").is_empty());
        assert!(PullSource::from_repo_digest("acc/bb:1").is_none());
    }

    #[test]
    fn the_host_loses_its_port_as_containerd_writes_it() {
        assert_eq!(host_of("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(host_of("[::1]:5000"), "::1");
        assert_eq!(host_of("registry.example"), "registry.example");
        assert_eq!(host_of("localhost"), "localhost");
    }
}
