//! Image references in every spelling a user might write a pattern for.
//!
//! Docker shows `nginx:1.25`, containerd stores `docker.io/library/nginx:1.25`:
//! a keep pattern must match either way, so each reference is tried with and
//! without Docker Hub's implicit prefixes.

/// Every form of `reference`: as given, without `docker.io/` or
/// `docker.io/library/`, and with them when it names a Docker Hub image.
#[must_use]
pub fn reference_forms(reference: &str) -> Vec<String> {
    let mut forms = vec![reference.to_owned()];
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
    forms.sort();
    forms.dedup();
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
