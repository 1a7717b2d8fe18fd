//! `explain`: find the objects a user names and say why each is kept or goes.

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

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
    if let Some(unique) = unique_bytes(d, inventory) {
        rows.push((
            "frees".into(),
            format!("{} (shared with no other image)", human_bytes(unique)),
        ));
    }
    if let (Kind::Image, Some(at), Some(source)) = (d.kind, d.last_used, d.last_used_source) {
        rows.push((
            "last used".into(),
            format!(
                "{} ({})",
                at.to_rfc3339_opts(SecondsFormat::Secs, true),
                source.as_str()
            ),
        ));
    }
    rows.extend(
        facts(d, inventory)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v)),
    );
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    for (what, value) in rows {
        let _ = writeln!(out, "  {:<width$} {value}", format!("{what}:"));
    }
    out
}

/// What removing an image alone frees (the bytes no other image shares),
/// when the runtime says; `None` for other kinds.
fn unique_bytes(d: &Decision, inventory: &Inventory) -> Option<u64> {
    if d.kind != Kind::Image {
        return None;
    }
    inventory
        .images
        .iter()
        .find(|i| i.id == d.id)
        .and_then(|i| i.unique_size)
}

/// The facts behind a decision, as `explain` prints them: a container's
/// own (state, image, pod, sandbox) or an image's (where it was pulled
/// from), then the decision's (protect rule, ready sandbox, what uses
/// it, the names that cannot come back…).
fn facts(d: &Decision, inventory: &Inventory) -> Vec<(&'static str, String)> {
    let mut facts = Vec::new();
    if d.kind == Kind::Container {
        let own = inventory.containers.iter().find(|c| c.id == d.id);
        facts.extend(own.into_iter().flat_map(crate::inventory::Container::facts));
    }
    if d.kind == Kind::Image {
        let own = inventory.images.iter().find(|i| i.id == d.id);
        facts.extend(own.into_iter().flat_map(crate::inventory::Image::facts));
    }
    facts.extend(d.facts.iter().cloned());
    facts
}

/// `explain --output json`: one document, the query and every decision it
/// matched (docs/contracts.md, "explain --output json").
#[derive(Serialize)]
struct Document<'a> {
    version: u32,
    query: &'a str,
    runtime: &'a str,
    node: &'a str,
    started_at: String,
    decisions: Vec<Explained<'a>>,
}

/// A decision as the JSON report writes it, with what `explain` adds.
#[derive(Serialize)]
struct Explained<'a> {
    #[serde(flatten)]
    decision: &'a Decision,
    #[serde(skip_serializing_if = "Option::is_none")]
    unique_bytes: Option<u64>,
    facts: Facts,
}

/// The facts as one object, in the text's order, named in `snake_case`
/// (`ready sandbox` is `ready_sandbox`). A name said twice keeps its first
/// value.
struct Facts(Vec<(String, String)>);

impl Serialize for Facts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seen = std::collections::HashSet::new();
        let mut map = s.serialize_map(None)?;
        for (what, value) in self.0.iter().filter(|(what, _)| seen.insert(what)) {
            map.serialize_entry(what, value)?;
        }
        map.end()
    }
}

/// Where the decisions `explain` found were made: what the JSON document
/// says beside them.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub runtime: &'a str,
    pub node: &'a str,
    pub started_at: DateTime<Utc>,
}

/// The decisions `query` found, with the facts behind each, as one JSON
/// document, pretty-printed with a final newline.
///
/// # Panics
/// Never: every field serializes.
#[must_use]
pub fn to_json(found: &[&Decision], inventory: &Inventory, query: &str, at: Context<'_>) -> String {
    let document = Document {
        version: 1,
        query,
        runtime: at.runtime,
        node: at.node,
        started_at: at.started_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        decisions: found
            .iter()
            .map(|d| Explained {
                decision: d,
                unique_bytes: unique_bytes(d, inventory),
                facts: Facts(
                    facts(d, inventory)
                        .into_iter()
                        .map(|(what, value)| (what.replace(' ', "_"), value))
                        .collect(),
                ),
            })
            .collect(),
    };
    let mut text =
        serde_json::to_string_pretty(&document).expect("an explanation always serializes");
    text.push('\n');
    text
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
                layer: None,
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
                provenance: crate::inventory::provenance::Provenance::default(),
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
        // Where it was pulled from: this inventory's runtime does not say.
        assert!(
            text.contains("provenance: unknown (the runtime does not say): every name counts as one that can come back"),
            "{text}"
        );
    }

    #[test]
    fn json_is_one_document_of_the_query_and_each_decision_with_its_facts() {
        let (mut inv, _) = node();
        inv.images[0].unique_size = Some(12_000_000);
        let p = plan(&inv, &Policy::builtin(), Utc::now());
        let at = Context {
            runtime: "docker",
            node: "node1",
            started_at: chrono::DateTime::parse_from_rfc3339("2026-11-26T05:00:00Z")
                .unwrap()
                .into(),
        };
        let found = find(&p, &inv, "nginx:1.25");
        let text = to_json(&found, &inv, "nginx:1.25", at);
        assert!(text.ends_with("}\n"), "{text}");
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["version"], 1);
        assert_eq!(doc["query"], "nginx:1.25");
        assert_eq!(doc["runtime"], "docker");
        assert_eq!(doc["node"], "node1");
        assert_eq!(doc["started_at"], "2026-11-26T05:00:00Z");
        let decisions = doc["decisions"].as_array().unwrap();
        assert_eq!(decisions.len(), 1);
        let image = &decisions[0];
        // The report's decision, field for field, then what explain adds.
        let report: serde_json::Value = serde_json::to_value(found[0]).unwrap();
        for (field, value) in report.as_object().unwrap() {
            assert_eq!(&image[field], value, "{field}");
        }
        assert_eq!(image["kind"], "image");
        assert_eq!(image["id"], "sha256:5555aaaa");
        assert_eq!(image["decision"], "keep");
        assert_eq!(image["rule"], "in_use");
        assert!(image["detail"].as_str().unwrap().contains("web"), "{text}");
        assert_eq!(image["unique_bytes"], 12_000_000);
        assert_eq!(image["last_used_source"], "container_create");
        assert_eq!(
            image["facts"],
            serde_json::json!({
                "provenance": "unknown (the runtime does not say): every name counts as one that can come back",
                "used_by": "abcdef0123456789"
            }),
            "{text}"
        );

        // A container's own facts come first, in the text's order.
        let found = find(&p, &inv, "web");
        let text = to_json(&found, &inv, "web", at);
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let container = &doc["decisions"][0];
        assert_eq!(container["kind"], "container");
        assert_eq!(container["name"], "web");
        assert_eq!(container["rule"], "running");
        assert!(container["bytes"].is_null());
        assert!(container.get("refs").is_none(), "images only");
        assert!(container.get("unique_bytes").is_none(), "images only");
        assert_eq!(
            container["facts"],
            serde_json::json!({"state": "running", "image": "nginx:1.25"}),
            "{text}"
        );
        let facts = &text[text.find("\"facts\"").unwrap()..];
        assert!(
            facts.find("\"state\"") < facts.find("\"image\""),
            "in the text's order: {text}"
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
