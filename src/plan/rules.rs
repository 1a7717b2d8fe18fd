//! The rule tables of docs/design.md, one function per kind, first match wins.
//!
//! Containers are decided first: images, volumes and networks are in use
//! only through the containers that are kept, so what a planned deletion
//! frees is freed in the same plan (as `docker system prune` does in
//! sequence).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

mod recency;

use super::{Decision, KeptUnpullable, Plan, Rule, Within, human_age};
use crate::inventory::pods::ReadySandboxes;
use crate::inventory::uses::{
    ContainerUse, IdOrder, ImageUses, VolumeAndNetworkUses, build_cache_depths, image_depths,
};
use crate::inventory::{
    BuildCacheEntry, Container, FsUsage, Image, Inventory, Kind, Network, Use, UseSource, Volume,
    reference_forms, refs, short_id,
};
use crate::policy::{Age, ImageMode, Policy};
use recency::recency_and_disk;

/// Networks every Docker engine has and no one may remove.
const BUILTIN_NETWORKS: [&str; 4] = ["bridge", "host", "none", "ingress"];

/// Which containers hold the images, volumes and networks they use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeldBy {
    /// Only containers the plan keeps (planning).
    Kept,
    /// Every container that exists (re-checking, after container removal).
    All,
}

/// Every decision for `inv`, on the node `inv` shows (a Kubernetes node or
/// not).
pub(super) fn decide_all(
    inv: &Inventory,
    policy: &Policy,
    now: DateTime<Utc>,
    use_rule: HeldBy,
    within: Option<&Within>,
) -> Plan {
    decide_all_on(inv, policy, now, use_rule, (within, inv.kubernetes_node()))
}

/// [`decide_all`] on a node known to be a Kubernetes node (why) or not:
/// a re-check's fresh facts may not show it.
pub(super) fn decide_all_on(
    inv: &Inventory,
    policy: &Policy,
    now: DateTime<Utc>,
    use_rule: HeldBy,
    (within, kubernetes_node): (Option<&Within>, Option<String>),
) -> Plan {
    let keep_unpullable = policy
        .images
        .keep_unpullable
        .keeps(kubernetes_node.is_some());
    // `run --plan`: what the reviewed plan does not delete is kept, before
    // what it uses is decided (a container kept holds its image).
    let restrict = |d: &mut [Decision]| {
        if let Some(within) = within {
            for d in d.iter_mut().filter(|d| d.decision == super::Action::Delete) {
                if !within.contains(&(d.kind, d.id.clone())) {
                    d.decision = super::Action::Keep;
                    d.rule = Rule::NotInPlan;
                    d.detail = format!(
                        "eligible now, but the reviewed plan does not delete it ({})",
                        d.detail
                    );
                }
            }
        }
    };
    let ready = ReadySandboxes::of(&inv.sandboxes);
    let total = inv.containers.len()
        + inv.networks.len()
        + inv.volumes.len()
        + inv.images.len()
        + inv.build_cache.len();
    let mut decisions: Vec<Decision> = Vec::with_capacity(total);
    decisions.extend(
        inv.containers
            .iter()
            .map(|c| container(c, &ready, policy, now)),
    );
    restrict(&mut decisions);
    // Which containers hold what they use: when planning, those kept;
    // when re-checking, every one left.
    let holds: Vec<bool> = decisions
        .iter()
        .map(|d| use_rule == HeldBy::All || d.decision == super::Action::Keep)
        .collect();
    // The containers' id order, found once for every index.
    let order = IdOrder::of(&inv.containers);
    let (networks, volumes) = {
        let users = Holders {
            index: VolumeAndNetworkUses::in_order(
                &inv.containers,
                &inv.volumes,
                &inv.networks,
                &order,
            ),
            decided: &decisions,
            holds: &holds,
        };
        let networks: Vec<Decision> = inv
            .networks
            .iter()
            .enumerate()
            .map(|n| network(n, &users, policy, now))
            .collect();
        let volumes: Vec<Decision> = inv
            .volumes
            .iter()
            .enumerate()
            .map(|v| volume(v, &users, policy, now))
            .collect();
        (networks, volumes)
    };
    let image_uses = ImageUses::in_order(&inv.containers, &inv.images, &order);
    let mut kinds = vec![inv.containers.len()];
    decisions.extend(networks);
    kinds.push(decisions.len());
    decisions.extend(volumes);
    kinds.push(decisions.len());
    restrict(&mut decisions[inv.containers.len()..]);
    let kept_unpullable = decide_images(
        &mut decisions,
        inv,
        (&image_uses, &holds),
        (policy, keep_unpullable),
        now,
        use_rule,
        &restrict,
    );
    kinds.push(decisions.len());
    let build_cache_start = decisions.len();
    decisions.extend(inv.build_cache.iter().map(|b| build_cache(b, policy, now)));
    restrict(&mut decisions[build_cache_start..]);
    for (d, depth) in decisions[build_cache_start..]
        .iter_mut()
        .zip(build_cache_depths(&inv.build_cache))
    {
        d.wave = depth;
    }
    kinds.push(decisions.len());
    sort_each_kind(&mut decisions, &kinds, order.is_identity());
    Plan {
        decisions,
        image_fs: inv.image_fs.clone(),
        kubernetes_node,
        kept_unpullable,
    }
}

/// Stable order: removal order of kinds (the order they were decided in,
/// each ending at its index of `kinds`), then id. Adapters list by id, so
/// a kind is usually in order already; a stable sort keeps duplicate ids
/// (odd engine data) in their input order. The containers' decisions are
/// in the containers' order: sorted already when `containers_sorted`.
fn sort_each_kind(decisions: &mut [Decision], kinds: &[usize], containers_sorted: bool) {
    let mut start = 0;
    for (k, &end) in kinds.iter().enumerate() {
        let kind = &mut decisions[start..end];
        let known_sorted = k == 0 && containers_sorted;
        if !known_sorted && !kind.is_sorted_by(|a, b| a.id <= b.id) {
            kind.sort_by(|a, b| a.id.cmp(&b.id));
        }
        start = end;
    }
}

/// Appends the decisions of every image to `decisions`: each by its own
/// rules, then (planning only) the rules over all images at once, with
/// every parent of a kept image held, and each image's removal wave. With
/// `images.disk`, what images no registry can give back keep from the
/// watermark.
fn decide_images(
    decisions: &mut Vec<Decision>,
    inv: &Inventory,
    (image_uses, holds): (&ImageUses, &[bool]),
    (policy, keep_unpullable): (&Policy, bool),
    now: DateTime<Utc>,
    use_rule: HeldBy,
    restrict: &impl Fn(&mut [Decision]),
) -> Option<KeptUnpullable> {
    let images_start = decisions.len();
    // Read off the containers once, in order: an image's users are then
    // looked up here, not read again out of order.
    let container_uses: Vec<Option<Use>> = inv
        .containers
        .iter()
        .map(|c| c.image_uses().max_by_key(|u| (u.at, u.source)))
        .collect();
    let mut last_uses = Vec::with_capacity(inv.images.len());
    decisions.extend(inv.images.iter().enumerate().map(|(n, i)| {
        let (decision, last_use) = image(
            (n, i),
            image_uses,
            (holds, &container_uses),
            (policy, keep_unpullable),
            now,
        );
        last_uses.push(last_use);
        decision
    }));
    restrict(&mut decisions[images_start..]);
    let depths = image_depths(&inv.images);
    hold_parents(
        &mut decisions[images_start..],
        &inv.images,
        image_uses,
        &depths,
        use_rule,
    );
    // Rules over all images at once: only when planning. A re-check sees
    // the batch's images alone, and the executor watches the disk itself.
    let mut kept_unpullable = None;
    if use_rule == HeldBy::Kept {
        kept_unpullable = recency_and_disk(
            &mut decisions[images_start..],
            &inv.images,
            &last_uses,
            policy,
            inv.image_fs.as_ref(),
            now,
        );
        // A child those rules kept holds its parent too.
        hold_parents(
            &mut decisions[images_start..],
            &inv.images,
            image_uses,
            &depths,
            use_rule,
        );
    }
    for (d, depth) in decisions[images_start..].iter_mut().zip(&depths) {
        d.wave = *depth;
    }
    kept_unpullable
}

/// Whether `at` is less than `min_age` before `now`. An unknown time is young:
/// what we cannot date we do not delete.
fn too_young(at: Option<DateTime<Utc>>, min_age: Age, now: DateTime<Utc>) -> bool {
    at.is_none_or(|t| now.signed_duration_since(t) < min_age.as_duration())
}

fn ago(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    at.map_or_else(
        || "at an unknown time".to_owned(),
        |t| format!("{} ago", human_age(now.signed_duration_since(t))),
    )
}

fn container(
    c: &Container,
    ready: &ReadySandboxes,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Decision {
    // The container's own facts (state, image, pod, sandbox) are for
    // `explain` to read off the inventory: kept out of each decision, they
    // cost a large node nothing.
    let d = |rule, detail: String| {
        Decision::new(Kind::Container, &c.id, c.display_name(), rule, detail).with_bytes(c.size)
    };
    let pod = c.pod.as_ref();
    let pod_name = || c.pod_display_name().unwrap_or_else(|| "?".to_owned());
    if c.state.is_live() {
        return d(Rule::Running, format!("container is {}", c.state.as_str()));
    }
    // Whatever the policy says (it accepts only true): kubelet's on every
    // runtime.
    if pod.is_some_and(|p| p.is_sandbox) {
        return d(
            Rule::PodSandbox,
            format!("sandbox of pod {}: kubelet owns it", pod_name()),
        );
    }
    if let Some((rule, label)) = policy
        .protect
        .labels
        .iter()
        .find_map(|r| r.matches(&c.labels).map(|l| (r, l)))
    {
        return d(Rule::ProtectedLabel, format!("label {label} is protected"))
            .with_fact("protect rule", rule.as_str());
    }
    if let Some((p, sandbox)) = pod
        .filter(|_| policy.protect.live_pod_sandboxes)
        .and_then(|p| ready.live(p).map(|s| (p, s)))
    {
        let via = if p.sandbox_id.as_deref() == Some(sandbox.id.as_str()) {
            "sandbox id"
        } else {
            "pod uid"
        };
        return d(
            Rule::LivePodSandbox,
            format!(
                "pod {} is live: its sandbox {} is ready",
                pod_name(),
                short_id(&sandbox.id)
            ),
        )
        .with_fact("ready sandbox", sandbox.id.clone())
        .with_fact("matched by", via);
    }
    if !policy.containers.enabled {
        return d(Rule::Disabled, "container pruning is disabled".to_owned());
    }
    // A container that never ran is aged from its creation.
    let (event, at) = match c.finished {
        Some(t) => ("exited", t),
        None => ("created", c.created),
    };
    let min_age = policy.containers.min_age;
    if too_young(Some(at), min_age, now) {
        return d(
            Rule::TooYoung,
            format!(
                "{event} {}, younger than min_age {min_age}",
                ago(Some(at), now)
            ),
        );
    }
    d(Rule::Eligible, format!("{event} {}", ago(Some(at), now)))
}

/// The containers that use volumes and networks, and which of them hold
/// what they use: when planning, those the plan keeps; when re-checking,
/// every one left.
struct Holders<'a> {
    index: VolumeAndNetworkUses,
    /// The containers' decisions, in the containers' order: each carries
    /// its container's id and display name, and reading them there costs
    /// fewer misses on a large node than reading the container again.
    decided: &'a [Decision],
    holds: &'a [bool],
}

impl<'a> Holders<'a> {
    /// The decision of the first of `users` (in container id order) that
    /// holds.
    fn first(&self, mut users: impl Iterator<Item = usize>) -> Option<&'a Decision> {
        users.find(|&n| self.holds[n]).map(|n| &self.decided[n])
    }
}

/// An image's decision by its own rules, and its last use. `holds` and
/// `container_uses` say, per container of the inventory, whether it holds
/// what it uses and the latest of its [`Container::image_uses`].
fn image(
    (n, i): (usize, &Image),
    uses: &ImageUses,
    (holds, container_uses): (&[bool], &[Option<Use>]),
    (policy, keep_unpullable): (&Policy, bool),
    now: DateTime<Utc>,
) -> (Decision, Option<Use>) {
    let found = uses.containers_of(n);
    // The first user (in id order) that holds it: the one a detail names.
    let holder = found
        .clone()
        .find(|&(c, _)| holds[c])
        .map(|(c, how)| (uses.container(c), how));
    let last_use = last_use(i, found.map(|(c, _)| container_uses[c]));
    let decision =
        image_rules(i, holder, last_use, (policy, keep_unpullable), now).with_last_use(last_use);
    (decision, last_use)
}

/// The latest use of an image: the latest of its creation, its last pull
/// or tag, its first sighting where the runtime gives no pull or tag time,
/// the creation and exit of any container made from it or mounting it
/// (deleted ones too: they were use), and the use the history recorded.
/// `users` gives the latest of each such container's uses.
fn last_use(i: &Image, users: impl Iterator<Item = Option<Use>>) -> Option<Use> {
    let at = |at: Option<DateTime<Utc>>, source| at.map(|at| Use { at, source });
    users
        .chain([
            at(i.created, UseSource::Created),
            at(i.last_tagged, UseSource::PullOrTag),
            at(i.first_seen, UseSource::FirstSeen),
            i.recorded_use,
        ])
        .flatten()
        .max_by_key(|u| (u.at, u.source))
}

/// "3d ago (container exit)", or "at an unknown time".
fn used_ago(last_use: Option<Use>, now: DateTime<Utc>) -> String {
    match last_use {
        Some(u) => format!("{} ({})", ago(Some(u.at), now), u.source.as_str()),
        None => ago(None, now),
    }
}

fn image_rules(
    i: &Image,
    holder: Option<(&Container, ContainerUse)>,
    last_use: Option<Use>,
    (policy, keep_unpullable): (&Policy, bool),
    now: DateTime<Utc>,
) -> Decision {
    let d = |rule, detail: String| image_decision(i, rule, detail);
    if let Some((user, how)) = holder {
        let sandbox = user
            .pod
            .as_ref()
            .filter(|p| p.is_sandbox)
            .map(|_| {
                format!(
                    "the sandbox image of pod {}: ",
                    user.pod_display_name().unwrap_or_default()
                )
            })
            .unwrap_or_default();
        let (fact, what) = match how {
            ContainerUse::MadeFrom => ("used by", "used by"),
            ContainerUse::Mounts => ("mounted by", "mounted as a volume by"),
        };
        return d(
            Rule::InUse,
            format!("{sandbox}{what} kept container {}", user.display_name()),
        )
        .with_fact(fact, user.id.clone());
    }
    let rules = &policy.images;
    for reference in i.tags.iter().chain(&i.digests) {
        let forms = reference_forms(reference);
        if let Some(p) = rules
            .keep
            .iter()
            .find(|p| forms.iter().any(|f| p.is_match(f)))
        {
            return d(
                Rule::KeepPattern,
                format!("{reference} matches keep pattern {}", p.as_str()),
            );
        }
    }
    if i.pinned {
        return d(Rule::Pinned, "pinned by the runtime".to_owned());
    }
    if !rules.enabled {
        return d(Rule::Disabled, "image pruning is disabled".to_owned());
    }
    if rules.mode == ImageMode::Dangling && !i.is_dangling() {
        return d(Rule::Tagged, "tagged, and mode is dangling".to_owned());
    }
    if keep_unpullable {
        let lost = i.lost_names();
        if let Some(first) = lost.first() {
            let names = match lost.len() {
                1 => (*first).to_owned(),
                2 => format!("{first} and 1 more name"),
                n => format!("{first} and {} more names", n - 1),
            };
            return d(
                Rule::Unpullable,
                format!("loaded or built on this node: no registry can give back {names}"),
            )
            .with_fact("cannot come back", lost.join(", "));
        }
    }
    if too_young(last_use.map(|u| u.at), rules.min_age, now) {
        return d(
            Rule::TooYoung,
            format!(
                "last used {}, younger than min_age {}",
                used_ago(last_use, now),
                rules.min_age
            ),
        );
    }
    // With `images.disk.from_kubelet`, kubelet's own floor too: the
    // stricter of the two keeps.
    if let Some(kubelet) = policy.kubelet()
        && too_young(last_use.map(|u| u.at), kubelet.minimum_gc_age.value, now)
    {
        return d(
            Rule::TooYoung,
            format!(
                "last used {}, younger than kubelet's imageMinimumGCAge {}",
                used_ago(last_use, now),
                kubelet.minimum_gc_age.value
            ),
        );
    }
    d(
        Rule::Eligible,
        format!("unused, last used {}", used_ago(last_use, now)),
    )
}

/// Keeps every image a kept child is built on (`in_use`, the child
/// named): the engine refuses to delete a parent while a child exists.
/// When re-checking, every child left holds its parent. `decisions`,
/// `images` and `depths` are parallel; children come before their parents
/// by rising depth, so each parent sees its children's final decisions.
fn hold_parents(
    decisions: &mut [Decision],
    images: &[Image],
    uses: &ImageUses,
    depths: &[u32],
    use_rule: HeldBy,
) {
    if images.iter().all(|i| i.parent.is_none()) {
        return;
    }
    let mut order: Vec<usize> = (0..images.len()).collect();
    order.sort_by(|&a, &b| (depths[a], &images[a].id).cmp(&(depths[b], &images[b].id)));
    for n in order {
        if decisions[n].decision != super::Action::Delete {
            continue;
        }
        // A child no shallower than its parent lies on a chain that loops
        // (engine data gone wrong): no order removes it safely, so it holds.
        let holder = uses.children_of(n).into_iter().find(|&child| {
            use_rule == HeldBy::All
                || decisions[child].decision == super::Action::Keep
                || depths[child] >= depths[n]
        });
        if let Some(child) = holder {
            let kept = &decisions[child];
            let detail = format!(
                "image {} is built on it and is kept ({})",
                kept.name,
                kept.rule.as_str()
            );
            let id = images[child].id.clone();
            rule_again(&mut decisions[n], Rule::InUse, detail);
            decisions[n].facts.push(("child image", id));
        }
    }
}

fn image_decision(i: &Image, rule: Rule, detail: String) -> Decision {
    let mut d = Decision::new(Kind::Image, &i.id, i.display_name(), rule, detail)
        .with_refs(i.tags.iter().chain(&i.digests).cloned().collect())
        .with_bytes(i.size);
    d.provenance = Some(Box::new(i.provenance.clone()));
    d
}

/// Decides `d` again by a later rule; the rest of it stands.
fn rule_again(d: &mut Decision, rule: Rule, detail: String) {
    d.rule = rule;
    d.decision = rule.action();
    d.detail = detail;
}

fn volume(
    (m, v): (usize, &Volume),
    users: &Holders,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Decision {
    let d = |rule, detail: String| {
        Decision::new(Kind::Volume, &v.name, v.name.clone(), rule, detail).with_bytes(v.size)
    };
    if let Some(user) = users.first(users.index.of_volume(m)) {
        return d(
            Rule::InUse,
            format!("mounted by kept container {}", user.name),
        )
        .with_fact("mounted by", user.id.clone());
    }
    let rules = &policy.volumes;
    if !rules.enabled {
        return d(Rule::Disabled, "volume pruning is disabled".to_owned());
    }
    if rules.anonymous_only && !v.anonymous {
        return d(
            Rule::NamedVolume,
            "named volume, and anonymous_only is set".to_owned(),
        );
    }
    if let Some(label) = rules.keep_labels.iter().find_map(|r| r.matches(&v.labels)) {
        return d(Rule::ProtectedLabel, format!("label {label} is protected"));
    }
    by_creation(d, v.created, rules.min_age, now)
}

fn network(
    (m, n): (usize, &Network),
    users: &Holders,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Decision {
    let d = |rule, detail: String| {
        Decision::new(Kind::Network, &n.id, n.name.clone(), rule, detail).with_bytes(Some(0))
    };
    if BUILTIN_NETWORKS.contains(&n.name.as_str()) {
        return d(Rule::Builtin, format!("{} is a built-in network", n.name));
    }
    // By id or by name: the first holder in container id order.
    if let Some(user) = users.first(users.index.of_network(m)) {
        return d(
            Rule::InUse,
            format!("kept container {} is attached", user.name),
        )
        .with_fact("attached", user.id.clone());
    }
    let rules = &policy.networks;
    if !rules.enabled {
        return d(Rule::Disabled, "network pruning is disabled".to_owned());
    }
    by_creation(d, n.created, rules.min_age, now)
}

/// The last two rules of an object aged from its creation: `too_young`,
/// else `eligible`.
fn by_creation(
    d: impl Fn(Rule, String) -> Decision,
    created: Option<DateTime<Utc>>,
    min_age: Age,
    now: DateTime<Utc>,
) -> Decision {
    if too_young(created, min_age, now) {
        return d(
            Rule::TooYoung,
            format!(
                "created {}, younger than min_age {min_age}",
                ago(created, now)
            ),
        );
    }
    d(
        Rule::Eligible,
        format!("unused, created {}", ago(created, now)),
    )
}

fn build_cache(b: &BuildCacheEntry, policy: &Policy, now: DateTime<Utc>) -> Decision {
    let d = |rule, detail: String| {
        let name = if b.description.is_empty() {
            short_id(&b.id)
        } else {
            b.description.clone()
        };
        Decision::new(Kind::BuildCache, &b.id, name, rule, detail).with_bytes(b.size)
    };
    let rules = &policy.build_cache;
    if !rules.enabled {
        return d(Rule::Disabled, "build cache pruning is disabled".to_owned());
    }
    let last_used = b.last_used.or(b.created);
    // A record a build holds right now is as young as it gets.
    if b.in_use || too_young(last_used, rules.min_age, now) {
        return d(
            Rule::TooYoung,
            if b.in_use {
                "in use by a build now".to_owned()
            } else {
                format!(
                    "last used {}, younger than min_age {}",
                    ago(last_used, now),
                    rules.min_age
                )
            },
        );
    }
    d(Rule::Eligible, format!("last used {}", ago(last_used, now)))
}

/// The ids of every container the plan keeps, for tests and reports.
#[cfg(test)]
pub(super) fn kept_ids(plan: &Plan) -> std::collections::BTreeSet<String> {
    plan.decisions
        .iter()
        .filter(|d| d.kind == Kind::Container && d.decision == super::Action::Keep)
        .map(|d| d.id.clone())
        .collect()
}
