//! Image references in every spelling a user might write a pattern for.
//!
//! Docker shows `nginx:1.25`, containerd stores `docker.io/library/nginx:1.25`:
//! a keep pattern must match either way, so each reference is tried with and
//! without Docker Hub's implicit prefixes.

/// The repository `reference` names: what comes before its digest (`@`) or
/// its tag (a `:` after the last `/`; one before it is a registry's
/// port). `app:1` and `app@sha256:…` name `app`; `localhost:5000/app`
/// names itself.
#[must_use]
pub fn repository(reference: &str) -> &str {
    split(reference).0
}

/// The tag of `reference`, if it has one (`1` of `app:1`).
#[must_use]
pub fn tag(reference: &str) -> Option<&str> {
    match split(reference).1 {
        Some((':', tag)) => Some(tag),
        _ => None,
    }
}

/// Whether `reference` is a digest reference (`app@sha256:…`).
#[must_use]
pub fn is_digest(reference: &str) -> bool {
    reference.contains('@')
}

/// `reference` in its fullest spelling, as dockerd and containerd store
/// it: `app:1` is `docker.io/library/app:1`.
#[must_use]
pub fn fullest(reference: &str) -> String {
    reference_forms(reference)
        .into_iter()
        .max_by_key(String::len)
        .unwrap_or_else(|| reference.to_owned())
}

/// The repository and, after it, `(':' or '@', tag or digest)`.
fn split(reference: &str) -> (&str, Option<(char, &str)>) {
    if let Some((name, digest)) = reference.split_once('@') {
        return (name, Some(('@', digest)));
    }
    let slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[slash..].rfind(':') {
        Some(colon) => (
            &reference[..slash + colon],
            Some((':', &reference[slash + colon + 1..])),
        ),
        None => (reference, None),
    }
}

/// Every form of `reference`: as given, without `docker.io/` or
/// `docker.io/library/`, and with them when it names a Docker Hub image.
#[must_use]
pub fn reference_forms(reference: &str) -> Vec<String> {
    let mut forms = other_forms(reference);
    forms.push(reference.to_owned());
    forms.sort();
    forms.dedup();
    forms
}

/// The name `reference` and all its spellings share: `reference` with
/// Docker Hub's implicit `docker.io/` and `library/` taken off the front,
/// as often as they lead. `nginx:1.25`, `library/nginx:1.25` and
/// `docker.io/library/nginx:1.25` are all `nginx:1.25`; a reference on
/// another registry is itself. Every form [`reference_forms`] gives has
/// the same one (a property test), so two references that share one name
/// the same image: that is how a container's reference is matched to the
/// images it uses. A slice of `reference`, so nothing is allocated: the
/// planner asks it of every container of the node.
#[must_use]
pub fn canonical(reference: &str) -> &str {
    let mut rest = reference;
    while let Some(shorter) = rest
        .strip_prefix("docker.io/")
        .or_else(|| rest.strip_prefix("library/"))
    {
        rest = shorter;
    }
    rest
}

/// The forms of [`reference_forms`] but the one given, in no order, and
/// perhaps with it again. Empty, with nothing allocated, for a reference
/// to another registry than Docker Hub: a node's commonest case, asked of
/// every container the planner indexes.
#[must_use]
pub fn other_forms(reference: &str) -> Vec<String> {
    let mut forms = Vec::new();
    let bare = reference
        .strip_prefix("docker.io/library/")
        .or_else(|| reference.strip_prefix("docker.io/"))
        .unwrap_or(reference);
    if bare != reference {
        forms.push(bare.to_owned());
        if let Some(rest) = bare.strip_prefix("library/") {
            forms.push(rest.to_owned());
        }
    }
    if is_docker_hub(bare) {
        if bare.contains('/') {
            forms.push(format!("docker.io/{bare}"));
        } else {
            forms.push(format!("docker.io/library/{bare}"));
            forms.push(format!("library/{bare}"));
        }
    }
    forms
}

/// Whether a reference without a registry host points at Docker Hub: its
/// first path component is not a host (no `.`, no `:` and not `localhost`).
fn is_docker_hub(reference: &str) -> bool {
    match reference.split_once('/') {
        None => true,
        Some((first, _)) => !(first.contains('.') || first.contains(':') || first == "localhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_splits_into_repository_and_tag_or_digest() {
        assert_eq!(repository("app:1"), "app");
        assert_eq!(tag("app:1"), Some("1"));
        assert_eq!(repository("app@sha256:abc"), "app");
        assert_eq!(tag("app@sha256:abc"), None);
        assert!(is_digest("app@sha256:abc") && !is_digest("app:1"));
        assert_eq!(repository("localhost:5000/app"), "localhost:5000/app");
        assert_eq!(tag("localhost:5000/app"), None);
        assert_eq!(repository("localhost:5000/app:2"), "localhost:5000/app");
        assert_eq!(
            repository("registry.k8s.io/pause:3.6"),
            "registry.k8s.io/pause"
        );
        assert_eq!(fullest("app:1"), "docker.io/library/app:1");
        assert_eq!(fullest("zed/used:1"), "docker.io/zed/used:1");
        assert_eq!(
            fullest("registry.k8s.io/pause:3.6"),
            "registry.k8s.io/pause:3.6"
        );
    }

    #[test]
    fn short_hub_name_gains_both_prefixes() {
        let forms = reference_forms("nginx:1.25");
        for f in [
            "nginx:1.25",
            "docker.io/library/nginx:1.25",
            "library/nginx:1.25",
        ] {
            assert!(forms.contains(&f.to_owned()), "{f} missing from {forms:?}");
        }
    }

    #[test]
    fn full_hub_name_loses_its_prefixes() {
        let forms = reference_forms("docker.io/library/nginx@sha256:abc");
        assert!(forms.contains(&"nginx@sha256:abc".to_owned()), "{forms:?}");
        let forms = reference_forms("docker.io/bitnami/redis:7");
        assert!(forms.contains(&"bitnami/redis:7".to_owned()), "{forms:?}");
    }

    #[test]
    fn other_registries_are_left_alone() {
        assert_eq!(
            reference_forms("registry.k8s.io/pause:3.9"),
            vec!["registry.k8s.io/pause:3.9"]
        );
        assert_eq!(
            reference_forms("localhost:5000/app:1"),
            vec!["localhost:5000/app:1"]
        );
    }

    #[test]
    fn spellings_meet_in_the_middle() {
        // A container's short reference and an image's full one share a form.
        let short = reference_forms("busybox:latest");
        let full = reference_forms("docker.io/library/busybox:latest");
        assert!(short.iter().any(|f| full.contains(f)));
        assert!(!reference_forms("busybox:1").contains(&"busybox:latest".to_owned()));
    }

    #[test]
    fn a_reference_and_its_spellings_share_one_canonical_name() {
        assert_eq!(canonical("nginx:1.25"), "nginx:1.25");
        assert_eq!(canonical("library/nginx:1.25"), "nginx:1.25");
        assert_eq!(canonical("docker.io/library/nginx:1.25"), "nginx:1.25");
        assert_eq!(canonical("docker.io/bitnami/redis:7"), "bitnami/redis:7");
        assert_eq!(
            canonical("registry.k8s.io/pause:3.9"),
            "registry.k8s.io/pause:3.9"
        );
        assert_eq!(canonical("localhost:5000/app:1"), "localhost:5000/app:1");
        assert_eq!(canonical("sha256:abc"), "sha256:abc");
        // Different names stay apart.
        assert_ne!(canonical("busybox:1"), canonical("busybox:latest"));
        assert_ne!(canonical("a/app:1"), canonical("b/app:1"));
    }

    proptest::proptest! {
        /// Matching on `canonical` finds every match the spellings find:
        /// each form of a reference has the reference's canonical name.
        #[test]
        fn every_spelling_has_the_references_canonical_name(
            reference in "(docker\\.io/|library/|localhost(:5000)?/|reg\\.io/|[a-z]{1,3}/){0,3}[a-z0-9:@./]{0,10}"
        ) {
            let name = canonical(&reference);
            for form in reference_forms(&reference) {
                proptest::prop_assert_eq!(canonical(&form), name, "form {} of {}", form, reference);
            }
        }
    }
}
