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
}
