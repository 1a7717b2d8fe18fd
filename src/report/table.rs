//! The table for people: decisions grouped by kind, then what the run did,
//! then a summary that says at a glance what was protected and why.

use std::fmt::Write as _;

use chrono::SecondsFormat;

use super::Report;
use super::fit::{self, Column};
use crate::execute::RemovalResult;
use crate::inventory::{Kind, refs, short_id};
use crate::plan::{Action, Rule};

/// Sizes as Docker prints them: decimal units, one decimal place.
#[must_use]
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["kB", "MB", "GB", "TB", "PB"];
    if bytes < 1000 {
        return format!("{bytes}B");
    }
    #[expect(
        clippy::cast_precision_loss,
        reason = "a size shown with one decimal place needs no more precision"
    )]
    let mut value = bytes as f64 / 1000.0;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

fn size(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "-".to_owned(), human_bytes)
}

/// `n` objects of `kind`, counted in words: `1 image`, `3 build cache records`.
#[must_use]
pub fn plural(kind: Kind, n: usize) -> String {
    let noun = match kind {
        Kind::Container => "container",
        Kind::Image => "image",
        Kind::Volume => "volume",
        Kind::Network => "network",
        Kind::BuildCache => "build cache record",
    };
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Rows of cells (a header row first), padded to the widest cell of each
/// column but the last; with a terminal's `width`, fitted to it (see
/// `fit.rs`), else at full width.
pub(super) fn push_rows(
    out: &mut String,
    rows: &[Vec<String>],
    columns: &[Column],
    width: Option<usize>,
) {
    let fitted;
    let rows = match width {
        Some(width) => {
            let mut cut = rows.to_vec();
            fit::fit_rows(&mut cut, columns, width);
            fitted = cut;
            &fitted[..]
        }
        None => rows,
    };
    let widths = fit::widths(rows);
    let columns = widths.len();
    for row in rows {
        let mut line = " ".repeat(fit::INDENT);
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == columns {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        let line = line.trim_end();
        // Fixed columns wider than the terminal: the row is cut, not wrapped.
        match width {
            Some(width) => out.push_str(&fit::cut(line, width)),
            None => out.push_str(line),
        }
        out.push('\n');
    }
}

/// The NAME cell: every reference of an image, else the name.
fn name(name: &str, refs: Option<&[String]>) -> String {
    refs.and_then(compact_refs)
        .unwrap_or_else(|| name.to_owned())
}

/// Every tag of an image in little room: the tags of one repository share
/// it (`nginx:1.25,latest`), and digests show only for an image without a
/// tag, shortened. `None` when there is no reference at all.
pub(super) fn compact_refs(refs: &[String]) -> Option<String> {
    let mut repos: Vec<(&str, Vec<&str>)> = Vec::new();
    for reference in refs.iter().filter(|r| !r.contains('@')) {
        let repo = refs::repository(reference);
        let tag = refs::tag(reference).unwrap_or_default();
        match repos.iter_mut().find(|(r, _)| *r == repo) {
            Some((_, tags)) => tags.push(tag),
            None => repos.push((repo, vec![tag])),
        }
    }
    if repos.is_empty() {
        let digests: Vec<String> = refs
            .iter()
            .map(|r| match r.split_once("@sha256:") {
                Some((repo, hex)) => format!("{repo}@sha256:{}", &hex[..hex.len().min(12)]),
                None => r.clone(),
            })
            .collect();
        return (!digests.is_empty()).then(|| digests.join(" "));
    }
    let names: Vec<String> = repos
        .into_iter()
        .map(|(repo, tags)| format!("{repo}:{}", tags.join(",")))
        .collect();
    Some(names.join(" "))
}

/// Renders the whole report as a table, at full width: for pipes, files
/// and scripts.
#[must_use]
pub fn render_table(report: &Report) -> String {
    render(report, None)
}

/// Renders the whole report as a table fitted to a terminal of `width`
/// columns: no line is longer.
#[must_use]
pub fn render_table_fitted(report: &Report, width: usize) -> String {
    fit::wrap(&render(report, Some(width)), width)
}

/// The columns of a section of decisions (DECISION, RULE, NAME, ID, SIZE,
/// WHY) and of the removals (RESULT, KIND, NAME, ID, SIZE, ERROR).
const COLUMNS: [Column; 6] = [
    Column::Fixed,
    Column::Fixed,
    Column::Text,
    Column::Id,
    Column::Fixed,
    Column::Text,
];

fn render(report: &Report, width: Option<usize>) -> String {
    let mut out = String::new();
    let at = report.started_at.to_rfc3339_opts(SecondsFormat::Secs, true);
    let (node, runtime) = (&report.node, &report.runtime);
    if let Some(refusal) = &report.refused {
        let _ = writeln!(
            out,
            "safeprune run REFUSED on {node} ({runtime}) at {at}: its plan below deletes {} \
             objects, more than the limit of {}; nothing was removed",
            refusal.planned, refusal.limit
        );
    } else {
        let what = if report.dry_run { "plan" } else { "run" };
        let _ = writeln!(out, "safeprune {what} on {node} ({runtime}) at {at}");
    }
    if !report.runtime_reason.is_empty() {
        let _ = writeln!(
            out,
            "runtime: {} ({})",
            report.runtime, report.runtime_reason
        );
    }
    if let Some(filter) = &report.filter {
        let _ = writeln!(out, "showing: {filter}; the summary counts the whole plan");
    }
    let mut shown = 0;
    for kind in Kind::ALL {
        let decisions: Vec<_> = report.decisions.iter().filter(|d| d.kind == kind).collect();
        if decisions.is_empty() {
            continue;
        }
        shown += decisions.len();
        let s = &report.summary;
        // The heading counts the whole plan's objects of the kind, as the
        // summary does; under a filter it says how many are listed.
        let all = s.delete.get(kind) + s.keep.get(kind);
        let listed = match report.filter {
            Some(_) => format!("; {} shown", decisions.len()),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "\n{} (delete {}, keep {}{listed})",
            plural(kind, all).to_uppercase(),
            s.delete.get(kind),
            s.keep.get(kind)
        );
        let mut rows = vec![
            ["DECISION", "RULE", "NAME", "ID", "SIZE", "WHY"]
                .map(String::from)
                .to_vec(),
        ];
        // Deletions first: they are what an operator checks.
        let mut ordered = decisions;
        ordered.sort_by_key(|d| d.decision);
        rows.extend(ordered.iter().map(|d| {
            vec![
                d.decision.as_str().to_owned(),
                d.rule.as_str().to_owned(),
                name(&d.name, d.refs.as_deref()),
                short_id(&d.id),
                size(d.bytes),
                d.detail.clone(),
            ]
        }));
        push_rows(&mut out, &rows, &COLUMNS, width);
    }
    if shown == 0 && report.filter.is_some() {
        let _ = writeln!(
            out,
            "\nnothing to show: the plan has no object the filter lets through"
        );
    }
    if !report.outcomes.is_empty() {
        let _ = writeln!(out, "\nREMOVALS");
        let mut rows = vec![
            ["RESULT", "KIND", "NAME", "ID", "SIZE", "ERROR"]
                .map(String::from)
                .to_vec(),
        ];
        rows.extend(report.outcomes.iter().map(|o| {
            vec![
                o.result.as_str().to_owned(),
                o.kind.as_str().to_owned(),
                name(&o.name, o.refs.as_deref()),
                short_id(&o.id),
                size(o.bytes),
                o.error.clone().unwrap_or_default(),
            ]
        }));
        push_rows(&mut out, &rows, &COLUMNS, width);
    }
    render_summary(&mut out, report);
    // docker system prune's last line, for a run that removed (a dry run
    // says what it would reclaim in its SUMMARY: `would delete: …`).
    if !report.dry_run {
        let _ = writeln!(
            out,
            "\nTotal reclaimed space: {}",
            human_bytes(report.summary.reclaimed_bytes)
        );
    }
    out
}

fn render_summary(out: &mut String, report: &Report) {
    let s = &report.summary;
    let list = |counts: &super::KindCounts| {
        Kind::ALL
            .iter()
            .filter(|k| !counts.not_applicable.contains(k))
            .map(|k| plural(*k, counts.get(*k)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "\nSUMMARY");
    if report.dry_run {
        let beside = report.docker_prune_bytes.map_or_else(String::new, |b| {
            format!(
                "; `docker system prune -a -f` would free {}",
                human_bytes(b)
            )
        });
        let _ = writeln!(
            out,
            "  would delete: {} ({} reclaimable{beside})",
            list(&s.delete),
            human_bytes(s.reclaimable_bytes)
        );
    } else {
        let deleted = report
            .outcomes
            .iter()
            .filter(|o| o.result == RemovalResult::Deleted)
            .count();
        let rules: Vec<String> = s
            .changed_by_rule
            .iter()
            .map(|(rule, n)| format!("{} {n}", rule.as_str()))
            .collect();
        let why: Vec<String> = s
            .skipped_by_reason
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(reason, n)| match reason {
                crate::execute::Reason::Changed if !rules.is_empty() => {
                    format!("changed {n}: now kept by {}", rules.join(", "))
                }
                _ => format!("{} {n}", reason.as_str()),
            })
            .collect();
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join(", "))
        };
        let _ = writeln!(
            out,
            "  deleted: {deleted} of {} planned ({} reclaimed); skipped {}{why}, failed {}",
            report
                .decisions
                .iter()
                .filter(|d| d.decision == Action::Delete)
                .count(),
            human_bytes(s.reclaimed_bytes),
            s.skipped,
            s.failed
        );
    }
    if let Some(pace) = &report.pace {
        let _ = writeln!(out, "  paced: {pace}");
    }
    let _ = writeln!(out, "  kept: {}", list(&s.keep));
    if !s.not_applicable.is_empty() {
        let kinds: Vec<&str> = s.not_applicable.iter().map(|k| k.as_str()).collect();
        let _ = writeln!(
            out,
            "  not applicable on {}: {}",
            report.runtime,
            kinds.join(", ")
        );
    }
    // The protections an operator looks for first, then the rest.
    let protections = [
        Rule::ProtectedLabel,
        Rule::LivePodSandbox,
        Rule::PodSandbox,
        Rule::Running,
        Rule::InUse,
        Rule::KeepPattern,
        Rule::Pinned,
        Rule::Unpullable,
    ];
    let mut parts = Vec::new();
    for rule in protections {
        for (kind, rules) in &s.kept_by_rule {
            if let Some(n) = rules.get(&rule) {
                parts.push(format!("{} {}", rule.as_str(), plural(*kind, *n)));
            }
        }
    }
    if !parts.is_empty() {
        let _ = writeln!(out, "  protected: {}", parts.join(", "));
    }
    disk_short(out, report);
}

/// The line that says images no registry can give back keep the image
/// file system over `low_percent`, when they do.
fn disk_short(out: &mut String, report: &Report) {
    if let Some((fs, held)) = report
        .image_fs
        .as_ref()
        .and_then(|fs| Some((fs, fs.kept_unpullable?)))
    {
        let low = fs
            .low_percent
            .map_or_else(|| "low_percent".to_owned(), |l| format!("low_percent {l}"));
        let (images, are) = if held.images == 1 {
            ("1 image".to_owned(), "is")
        } else {
            (format!("{} images", held.images), "are")
        };
        let _ = writeln!(
            out,
            "  disk: {low} not reached: {images} ({}) no registry can give back {are} kept (images.keep_unpullable)",
            human_bytes(held.bytes)
        );
    }
}
