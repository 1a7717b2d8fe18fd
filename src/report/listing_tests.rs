//! What `plan` lists: `--only` and `--kind` filter the listing
//! and never the summary, and the tables fit a terminal's width while piped
//! output keeps its full width.

use super::tests::sample_report;
use super::*;
use crate::plan::Action;

/// Every line of `text` that is longer than `width` characters.
fn too_long(text: &str, width: usize) -> Vec<&str> {
    text.lines()
        .filter(|line| line.chars().count() > width)
        .collect()
}

#[test]
fn a_fitted_table_has_no_line_longer_than_the_terminal() {
    let outcomes = vec![Outcome {
        kind: Kind::Image,
        id: "sha256:dead".into(),
        name: "sha256:dead".into(),
        refs: Some(vec![]),
        result: RemovalResult::Failed,
        bytes: Some(187_000_000),
        reason: Some(Reason::EngineError),
        error: Some(format!("conflict: {}", "unable to delete ".repeat(8))),
        kept_by: None,
    }];
    let run = sample_report(outcomes);
    let refused = sample_report(vec![]).refused(Refusal {
        planned: 2,
        limit: 1,
    });
    for report in [&sample_report(vec![]), &run, &refused] {
        let full = render_table(report);
        assert!(
            !too_long(&full, 120).is_empty(),
            "the sample is wide:\n{full}"
        );
        for width in [60, 80, 120] {
            let fitted = render_table_fitted(report, width);
            assert_eq!(too_long(&fitted, width), Vec::<&str>::new(), "{fitted}");
            // A cut cell says so.
            assert!(fitted.contains('…'), "{fitted}");
            // Every rule and decision is still there, whole.
            for rule in ["eligible", "protected_label", "live_pod_sandbox", "in_use"] {
                assert!(fitted.contains(rule), "{width}: {rule}:\n{fitted}");
            }
        }
    }
}

#[test]
fn at_80_columns_ids_keep_12_characters_and_names_stay_readable() {
    let fitted = render_table_fitted(&sample_report(vec![]), 80);
    assert!(fitted.contains("cc0000000000"), "{fitted}");
    assert!(fitted.contains("old-job"), "{fitted}");
    assert!(fitted.contains("  delete    eligible"), "{fitted}");
}

#[test]
fn a_table_that_fits_the_terminal_is_the_piped_table() {
    let report = sample_report(vec![]);
    assert_eq!(render_table_fitted(&report, 1000), render_table(&report));
}

#[test]
fn only_delete_lists_no_kept_object_and_keeps_the_whole_summary() {
    let whole = sample_report(vec![]);
    let report = sample_report(vec![]).listing_only(Filter {
        only: Some(Action::Delete),
        kinds: None,
    });
    assert!(!report.decisions.is_empty());
    assert!(
        report
            .decisions
            .iter()
            .all(|d| d.decision == Action::Delete)
    );
    assert_eq!(report.summary, whole.summary);
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(
        v["filter"],
        serde_json::json!({"only": "delete", "kinds": null})
    );
    assert_eq!(v["summary"]["keep"]["container"], 2);
    let table = render_table(&report);
    assert!(
        table.contains("showing: delete only; the summary counts the whole plan\n"),
        "{table}"
    );
    assert!(!table.contains("  keep "), "{table}");
    assert!(
        table.contains("3 CONTAINERS (delete 1, keep 2; 1 shown)"),
        "{table}"
    );
    assert!(table.contains("  kept: 2 containers, 1 image"), "{table}");
}

#[test]
fn kind_lists_only_those_kinds() {
    let report = sample_report(vec![]).listing_only(Filter {
        only: None,
        kinds: Some([Kind::Image].into()),
    });
    assert!(report.decisions.iter().all(|d| d.kind == Kind::Image));
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(
        v["filter"],
        serde_json::json!({"only": null, "kinds": ["image"]})
    );
    let table = render_table(&report);
    assert!(table.contains("showing: kinds: image;"), "{table}");
    assert!(!table.contains("CONTAINERS"), "{table}");
    // Nothing let through: said, not an empty page.
    let none = sample_report(vec![]).listing_only(Filter {
        only: Some(Action::Delete),
        kinds: Some([Kind::Volume].into()),
    });
    assert!(none.decisions.is_empty());
    assert!(render_table(&none).contains("nothing to show"));
}

#[test]
fn no_filter_adds_no_field() {
    let report = sample_report(vec![]).listing_only(Filter::default());
    assert!(report.filter.is_none());
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert!(v.get("filter").is_none());
}

/// docs/reports.md's "JSON report" field table names every top-level field
/// a filtered plan's document has, `filter` included.
#[test]
fn the_documented_fields_name_every_field_of_a_filtered_plan() {
    let design = include_str!("../../docs/reports.md");
    let section = design
        .split("\n## JSON report\n")
        .nth(1)
        .and_then(|s| s.split("\nA decision:\n").next())
        .expect("docs/reports.md has a JSON report section");
    let documented: Vec<&str> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|line| line.split('`').next())
        .collect();
    let report = sample_report(vec![]).listing_only(Filter {
        only: Some(Action::Keep),
        kinds: Some([Kind::Container, Kind::Image].into()),
    });
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    for key in v.as_object().unwrap().keys() {
        assert!(
            documented.contains(&key.as_str()),
            "{key} is not in docs/reports.md's JSON report fields: {documented:?}"
        );
    }
    assert_eq!(
        v["filter"],
        serde_json::json!({"only": "keep", "kinds": ["container", "image"]})
    );
}
