//! The table for people: decisions grouped by kind, then what the run did,
//! then a summary that says at a glance what was protected and why.

use std::fmt::Write as _;

use chrono::SecondsFormat;

use super::{RemovalResult, Report};
use crate::inventory::short_id;
use crate::plan::{Action, Rule};
use crate::runtime::Kind;

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

fn plural(kind: Kind, n: usize) -> String {
    let noun = match kind {
        Kind::Container => "container",
        Kind::Image => "image",
        Kind::Volume => "volume",
        Kind::Network => "network",
        Kind::BuildCache => "build cache record",
    };
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Rows of cells, padded to the widest cell of each column but the last.
fn push_rows(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let mut line = String::from("  ");
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == columns {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Renders the whole report as a table.
#[must_use]
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "safeprune {} on {} ({}) at {}",
        if report.dry_run { "plan" } else { "run" },
        report.node,
        report.runtime,
        report.started_at.to_rfc3339_opts(SecondsFormat::Secs, true)
    );
    if !report.runtime_reason.is_empty() {
        let _ = writeln!(
            out,
            "runtime: {} ({})",
            report.runtime, report.runtime_reason
        );
    }
    for kind in Kind::ALL {
        let decisions: Vec<_> = report.decisions.iter().filter(|d| d.kind == kind).collect();
        if decisions.is_empty() {
            continue;
        }
        let s = &report.summary;
        let _ = writeln!(
            out,
            "\n{} (delete {}, keep {})",
            plural(kind, decisions.len()).to_uppercase(),
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
                d.name.clone(),
                short_id(&d.id),
                size(d.bytes),
                d.detail.clone(),
            ]
        }));
        push_rows(&mut out, &rows);
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
                o.name.clone(),
                short_id(&o.id),
                size(o.bytes),
                o.error.clone().unwrap_or_default(),
            ]
        }));
        push_rows(&mut out, &rows);
    }
    render_summary(&mut out, report);
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
        let _ = writeln!(
            out,
            "  would delete: {} ({} reclaimable)",
            list(&s.delete),
            human_bytes(s.reclaimable_bytes)
        );
    } else {
        let deleted = report
            .outcomes
            .iter()
            .filter(|o| o.result == RemovalResult::Deleted)
            .count();
        let _ = writeln!(
            out,
            "  deleted: {deleted} of {} planned ({} reclaimed); skipped {}, failed {}",
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
}
