//! The image rules that weigh images against each other, when planning:
//! `keep_recent`, then `images.disk`'s watermarks.

use super::{
    DateTime, Decision, FsUsage, HashMap, Image, KeptUnpullable, Policy, Rule, Use, Utc, refs,
    rule_again, used_ago,
};

/// The image rules that weigh images against each other, in order, on the
/// images their own rules left eligible: `keep_recent` (the N most
/// recently used of each repository, among all its images), then
/// `disk_below_threshold` and `lru_not_needed` (with `images.disk`: only
/// under pressure, least recently used first, until the projection reaches
/// `low_percent`). `decisions`, `images` and `last_uses` are parallel.
pub(super) fn recency_and_disk(
    decisions: &mut [Decision],
    images: &[Image],
    last_uses: &[Option<Use>],
    policy: &Policy,
    image_fs: Option<&FsUsage>,
    now: DateTime<Utc>,
) -> Option<KeptUnpullable> {
    let rules = &policy.images;
    let eligible = |d: &Decision| d.rule == Rule::Eligible;
    if rules.keep_recent > 0 {
        let recent = most_recent_of_each_repository(images, last_uses, rules.keep_recent);
        for (n, repository) in recent {
            if eligible(&decisions[n]) {
                let detail = format!(
                    "one of the {} most recently used images of {repository}; last used {}",
                    rules.keep_recent,
                    used_ago(last_uses[n], now)
                );
                rule_again(&mut decisions[n], Rule::KeepRecent, detail);
            }
        }
    }
    let Some(disk) = &rules.disk else {
        return None;
    };
    let mut candidates: Vec<usize> = (0..images.len())
        .filter(|&n| eligible(&decisions[n]))
        .collect();
    let Some(fs) = image_fs.filter(|fs| fs.percent() > f64::from(disk.high_percent)) else {
        let why = image_fs.map_or_else(
            || {
                "the image file system's usage is unknown: nothing is pruned by disk pressure"
                    .to_owned()
            },
            |fs| {
                format!(
                    "{} is {:.0}% full, at or under high_percent {}",
                    fs.named(),
                    fs.percent(),
                    disk.high_percent
                )
            },
        );
        for n in candidates {
            rule_again(&mut decisions[n], Rule::DiskBelowThreshold, why.clone());
        }
        return None;
    };
    // Least recently used first; a tie goes by id, so the plan does not
    // depend on listing order.
    candidates.sort_by(|&a, &b| {
        let at = |n: usize| last_uses[n].map(|u| u.at);
        at(a)
            .cmp(&at(b))
            .then_with(|| images[a].id.cmp(&images[b].id))
    });
    let low = f64::from(disk.low_percent);
    let mut freed = 0_u64;
    let mut needed = 0;
    for &n in &candidates {
        if fs.percent_after(freed) <= low {
            break;
        }
        freed = freed.saturating_add(images[n].unique_size.or(images[n].size).unwrap_or(0));
        needed += 1;
    }
    for &n in &candidates[needed..] {
        let removing = if needed == 1 {
            "the less recently used image".to_owned()
        } else {
            format!("the {needed} less recently used images")
        };
        let detail = format!(
            "removing {removing} brings {} \
             from {:.0}% to {:.0}%, at or under low_percent {}; last used {}",
            fs.named(),
            fs.percent(),
            fs.percent_after(freed),
            disk.low_percent,
            used_ago(last_uses[n], now)
        );
        rule_again(&mut decisions[n], Rule::LruNotNeeded, detail);
    }
    // Every eligible image goes and the file system stays over low: what
    // images that cannot come back keep, if any.
    let bytes = |n: usize| images[n].unique_size.or(images[n].size).unwrap_or(0);
    let held: Vec<usize> = (0..images.len())
        .filter(|&n| decisions[n].rule == Rule::Unpullable)
        .collect();
    (fs.percent_after(freed) > low && !held.is_empty()).then(|| KeptUnpullable {
        images: held.len(),
        bytes: held.iter().map(|&n| bytes(n)).sum(),
    })
}

/// The images among the `keep` most recently used of some repository they
/// name, each with that repository; ties go by id. Dangling images name
/// none.
fn most_recent_of_each_repository(
    images: &[Image],
    last_uses: &[Option<Use>],
    keep: u32,
) -> Vec<(usize, String)> {
    let mut by_repository: HashMap<String, Vec<usize>> = HashMap::new();
    for (n, image) in images.iter().enumerate() {
        let mut repositories: Vec<String> = image
            .tags
            .iter()
            .chain(&image.digests)
            .filter_map(|r| repository(r))
            .collect();
        repositories.sort();
        repositories.dedup();
        for r in repositories {
            by_repository.entry(r).or_default().push(n);
        }
    }
    // Each image once, with the first repository (in name order) keeping it.
    let mut kept: Vec<Option<String>> = vec![None; images.len()];
    let mut repositories: Vec<_> = by_repository.into_iter().collect();
    repositories.sort();
    for (repository, mut members) in repositories {
        // Most recent first; unknown last use last; a tie by id.
        members.sort_by(|&a, &b| {
            let at = |n: usize| last_uses[n].map(|u| u.at);
            at(b)
                .cmp(&at(a))
                .then_with(|| images[a].id.cmp(&images[b].id))
        });
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        for &n in members.iter().take(keep) {
            kept[n].get_or_insert_with(|| repository.clone());
        }
    }
    kept.into_iter()
        .enumerate()
        .filter_map(|(n, r)| Some((n, r?)))
        .collect()
}

/// The repository a reference names, in its fullest spelling
/// (`docker.io/library/app` for `app:1`); `None` for an id.
fn repository(reference: &str) -> Option<String> {
    let name = refs::repository(reference);
    if name.is_empty() || name.starts_with("sha256:") {
        return None;
    }
    Some(refs::fullest(name))
}
