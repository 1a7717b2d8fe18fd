//! `explain`: find the objects a user names and say why each is kept or goes.

use std::fmt::Write as _;

use crate::inventory::Kind;
use crate::inventory::{Inventory, reference_forms};
use crate::plan::{Decision, Plan};
use crate::report::human_bytes;

/// Shortest id prefix accepted, so `a` does not match half the node.
const MIN_PREFIX: usize = 4;

/// The decisions for every object that `query` names: an id or unique id
/// prefix, a container, volume or network name, or an image reference in any
/// spelling.
#[must_use]
pub fn find<'p>(plan: &'p Plan, inventory: &Inventory, query: &str) -> Vec<&'p Decision> {
    let query = query.trim();
    let bare = |id: &str| id.strip_prefix("sha256:").unwrap_or(id).to_owned();
    let wanted = bare(query.trim_start_matches('/'));
    // Container names by id, once: asking the containers per decision
    // scanned them all for every decision of the node.
    let container_names: std::collections::HashMap<&str, &[String]> = inventory
        .containers
        .iter()
        .map(|c| (c.id.as_str(), c.names.as_slice()))
        .collect();
    let names = |d: &Decision| -> Vec<String> {
        match d.kind {
            Kind::Container => container_names
                .get(d.id.as_str())
                .map(|names| names.to_vec())
                .unwrap_or_default(),
            Kind::Image => d
                .refs
                .iter()
                .flatten()
                .flat_map(|r| reference_forms(r))
                .collect(),
            Kind::Volume | Kind::Network | Kind::BuildCache => vec![d.name.clone()],
        }
    };
    // A containerd id is `<namespace>/<id>`: the id alone names it too.
    let ids = |d: &Decision| {
        let mut ids = vec![bare(&d.id)];
        if let Some((_, id)) = d.id.split_once('/') {
            ids.push(bare(id));
        }
        ids
    };
    let exact: Vec<&Decision> = plan
        .decisions
        .iter()
        .filter(|d| ids(d).contains(&wanted) || names(d).iter().any(|n| n == query || *n == wanted))
        .collect();
    if !exact.is_empty() || wanted.len() < MIN_PREFIX {
        return exact;
    }
    plan.decisions
        .iter()
        .filter(|d| ids(d).iter().any(|id| id.starts_with(&wanted)))
        .collect()
}

/// One decision, with the facts behind it, for people. An image found by
/// one of its references is headed by that reference, and every other
/// reference is listed: `explain nginx:1.25` answers about `nginx:1.25`.
#[must_use]
pub fn render(d: &Decision, inventory: &Inventory, query: &str) -> String {
    let mut out = String::new();
    let refs = d.refs.as_deref().unwrap_or_default();
    let query = query.trim();
    let heading = refs
        .iter()
        .find(|r| reference_forms(r).iter().any(|f| f == query))
        .unwrap_or(&d.name);
    let _ = writeln!(out, "{} {heading}", d.kind);
    let mut rows: Vec<(String, String)> = vec![("id".into(), d.id.clone())];
    if !refs.is_empty() {
        rows.push(("references".into(), refs.join(", ")));
    }
    rows.extend([
        ("decision".into(), d.decision.as_str().into()),
        ("rule".into(), d.rule.as_str().into()),
        ("why".into(), d.detail.clone()),
    ]);
    if let Some(bytes) = d.bytes {
        rows.push(("size".into(), human_bytes(bytes)));
    }
    if d.kind == Kind::Image {
        if let Some(unique) = inventory
            .images
            .iter()
            .find(|i| i.id == d.id)
            .and_then(|i| i.unique_size)
        {
            rows.push((
                "frees".into(),
                format!("{} (shared with no other image)", human_bytes(unique)),
            ));
        }
        if let (Some(at), Some(source)) = (d.last_used, d.last_used_source) {
            rows.push((
                "last used".into(),
                format!(
                    "{} ({})",
                    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    source.as_str()
                ),
            ));
        }
    }
    if d.kind == Kind::Container {
        let own = inventory.containers.iter().find(|c| c.id == d.id);
        rows.extend(
            own.into_iter()
                .flat_map(crate::inventory::Container::facts)
                .map(|(k, v)| (k.to_owned(), v)),
        );
    }
    rows.extend(d.facts.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    for (what, value) in rows {
        let _ = writeln!(out, "  {:<width$} {value}", format!("{what}:"));
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::inventory::{Container, ContainerState, Image, Labels};
    use crate::plan::plan;
    use crate::policy::Policy;

    fn node() -> (Inventory, Plan) {
        let now = Utc::now();
        let inv = Inventory {
            runtime: "docker".into(),
            containers: vec![Container {
                image_mounts: Vec::new(),
                id: "abcdef0123456789".into(),
                names: vec!["web".into()],
                state: ContainerState::Running,
                labels: Labels::new(),
                image_id: "sha256:5555aaaa".into(),
                image_ref: "nginx:1.25".into(),
                created: now,
                finished: None,
                volumes: vec![],
                networks: vec![],
                pod: None,
                size: None,
            }],
            images: vec![Image {
                cri_pinned: false,
                parent: None,
                id: "sha256:5555aaaa".into(),
                tags: vec!["nginx:latest".into(), "nginx:1.25".into()],
                digests: vec!["nginx@sha256:feed".into()],
                created: None,
                last_tagged: None,
                size: Some(187_000_000),
                pinned: false,
                unique_size: None,
                recorded_use: None,
                first_seen: None,
            }],
            ..Inventory::default()
        };
        let p = plan(&inv, &Policy::builtin(), now);
        (inv, p)
    }

    #[test]
    fn finds_by_name_id_prefix_and_any_reference_spelling() {
        let (inv, p) = node();
        let kinds = |q: &str| find(&p, &inv, q).iter().map(|d| d.kind).collect::<Vec<_>>();
        assert_eq!(kinds("web"), vec![Kind::Container]);
        assert_eq!(kinds("/web"), vec![Kind::Container]);
        assert_eq!(kinds("abcdef"), vec![Kind::Container]);
        assert_eq!(kinds("abcdef0123456789"), vec![Kind::Container]);
        assert_eq!(kinds("docker.io/library/nginx:1.25"), vec![Kind::Image]);
        assert_eq!(kinds("nginx:latest"), vec![Kind::Image]);
        assert_eq!(kinds("nginx@sha256:feed"), vec![Kind::Image]);
        assert_eq!(kinds("sha256:5555aaaa"), vec![Kind::Image]);
        assert_eq!(kinds("5555"), vec![Kind::Image]);
        assert!(kinds("ab").is_empty(), "too short a prefix matches nothing");
        assert!(kinds("nope").is_empty());
    }

    #[test]
    fn render_names_rule_and_facts() {
        let (inv, p) = node();
        let text = render(find(&p, &inv, "nginx:1.25")[0], &inv, "nginx:1.25");
        assert!(text.starts_with("image nginx:1.25\n"), "{text}");
        assert!(
            text.contains("references: nginx:latest, nginx:1.25, nginx@sha256:feed"),
            "{text}"
        );
        assert!(text.contains("rule:"), "{text}");
        assert!(text.contains("in_use"), "{text}");
        assert!(text.contains("used by:"), "{text}");
        assert!(text.contains("abcdef0123456789"), "{text}");
        // Its last use, and what it was: the running container's creation.
        let created = inv.containers[0]
            .created
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        assert!(
            text.contains(&format!("last used:  {created} (container create)")),
            "{text}"
        );
    }

    #[test]
    fn render_shows_what_removing_an_image_alone_frees() {
        let (mut inv, _) = node();
        inv.images[0].unique_size = Some(12_000_000);
        let p = plan(&inv, &Policy::builtin(), Utc::now());
        let text = render(find(&p, &inv, "nginx:1.25")[0], &inv, "nginx:1.25");
        assert!(
            text.contains("frees:      12.0MB (shared with no other image)"),
            "{text}"
        );
    }
}
