//! What `plan` lists, on a private dockerd: `--only` and
//! `--kind` list only the objects they name, in the table and the JSON,
//! while the summary and `--save` stay the whole plan's; and the table fits
//! the terminal it is printed on (under a real pseudo-terminal, script(1)),
//! while piped it keeps its full width.

use crate::util;

use serde_json::Value;
use util::docker::PrivateDockerd;
use util::node::{Cli, Runtime};

/// Every object may go as soon as the rules allow.
const ZERO_AGES: &str = "containers: { min_age: \"0\" }\n\
                         images: { min_age: \"0\" }\n\
                         networks: { min_age: \"0\" }\n";

/// A node with something to delete and something to keep of two kinds,
/// named long enough that the table is wider than 80 columns.
async fn lay_out(engine: &PrivateDockerd) -> Cli {
    let base = engine
        .import_busybox_image("sp/base-image-of-the-web-service:1", Some("base"))
        .await;
    engine
        .import_busybox_image(
            "registry.example.com/team/an-unused-image-with-a-long-name:1",
            Some("unused"),
        )
        .await;
    engine
        .run_forever("web-service-that-keeps-running-all-day", &base, &[])
        .await;
    engine
        .run_to_exit("nightly-report-job-that-finished-long-ago", &base, &[])
        .await;
    Cli::new(&Runtime::Docker(engine.endpoint()), ZERO_AGES)
}

fn decisions(report: &Value) -> &Vec<Value> {
    report["decisions"].as_array().expect("decisions")
}

/// `plan args…` as a table, piped: its stdout.
fn table(cli: &Cli, args: &[&str]) -> String {
    let out = cli.run(&[&["plan"], args].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn only_and_kind_list_what_they_name_and_the_summary_stays_whole() {
    let engine = PrivateDockerd::start().await;
    let cli = lay_out(&engine).await;
    let (code, whole) = cli.json(&["plan", "-o", "json"]);
    assert_eq!(code, Some(0), "{whole}");
    assert!(whole.get("filter").is_none(), "no filter, no field");
    let kept = decisions(&whole)
        .iter()
        .filter(|d| d["decision"] == "keep")
        .count();
    assert!(kept > 0 && kept < decisions(&whole).len(), "{whole}");

    // --only delete: no kept object, in the JSON and in the table.
    let (code, only) = cli.json(&["plan", "-o", "json", "--only", "delete"]);
    assert_eq!(code, Some(0), "{only}");
    assert!(!decisions(&only).is_empty());
    assert!(
        decisions(&only).iter().all(|d| d["decision"] == "delete"),
        "{only}"
    );
    assert_eq!(
        only["filter"],
        serde_json::json!({"only": "delete", "kinds": null})
    );
    assert_eq!(only["summary"], whole["summary"], "the summary is whole");
    let listed = table(&cli, &["--only", "delete"]);
    assert!(
        listed.contains("showing: delete only; the summary counts the whole plan"),
        "{listed}"
    );
    assert!(
        !listed.lines().any(|l| l.starts_with("  keep ")),
        "{listed}"
    );
    assert!(
        listed.lines().any(|l| l.starts_with("  delete ")),
        "{listed}"
    );
    assert!(!listed.contains("web-service-that-keeps"), "{listed}");
    assert!(listed.contains("  kept: "), "{listed}");

    // --kind image: no container, in the JSON and in the table.
    let (code, images) = cli.json(&["plan", "-o", "json", "--kind", "image"]);
    assert_eq!(code, Some(0), "{images}");
    assert!(!decisions(&images).is_empty());
    assert!(
        decisions(&images).iter().all(|d| d["kind"] == "image"),
        "{images}"
    );
    assert_eq!(
        images["filter"],
        serde_json::json!({"only": null, "kinds": ["image"]})
    );
    assert_eq!(images["summary"], whole["summary"]);
    let listed = table(&cli, &["--kind", "image"]);
    assert!(listed.contains("showing: kinds: image;"), "{listed}");
    assert!(!listed.contains("CONTAINER"), "{listed}");
    assert!(!listed.contains("nightly-report-job"), "{listed}");
    assert!(listed.contains("IMAGES"), "{listed}");

    // Repeated or comma-separated, as the JSON spells a kind or as clap does.
    for args in [
        &["--kind", "container,image"][..],
        &["--kind", "image", "--kind", "container"],
        &["--kind", "container", "--kind", "image", "--kind", "image"],
    ] {
        let (code, both) = cli.json(&[&["plan", "-o", "json"], args].concat());
        assert_eq!(code, Some(0), "{args:?}");
        assert_eq!(
            both["filter"]["kinds"],
            serde_json::json!(["container", "image"]),
            "{args:?}"
        );
    }
    for kind in ["build-cache", "build_cache"] {
        let (code, cache) = cli.json(&["plan", "-o", "json", "--kind", kind]);
        assert_eq!(code, Some(0), "{kind}");
        assert_eq!(cache["filter"]["kinds"], serde_json::json!(["build_cache"]));
    }
    for bad in [&["--kind", "pod"][..], &["--only", "all"], &["--kind", ""]] {
        let out = cli.run(&[&["plan"], bad].concat());
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }

    save_and_compare_take_the_filter_as_documented(&cli, &whole);
}

/// `--save` writes the whole plan whatever is listed; `--compare` lists by
/// safeprune's decision and the kind, its summary whole.
fn save_and_compare_take_the_filter_as_documented(cli: &Cli, whole: &Value) {
    // --save writes the whole plan, whatever is listed.
    let saved = cli.path("saved.json");
    let out = cli.run(&[
        "plan",
        "--only",
        "delete",
        "--kind",
        "image",
        "--save",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let saved: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    assert_eq!(decisions(&saved).len(), decisions(whole).len());

    // --compare lists by safeprune's decision and the kind too: --only keep
    // leaves what the command removes and safeprune keeps.
    let (code, compared) = cli.json(&[
        "plan",
        "-o",
        "json",
        "--compare",
        "docker-prune",
        "--only",
        "keep",
    ]);
    assert_eq!(code, Some(0), "{compared}");
    assert_eq!(compared["filter"]["only"], "keep");
    assert!(compared["only_safeprune"].as_array().unwrap().is_empty());
    assert!(compared["both"].as_array().unwrap().is_empty());
    let (_, unfiltered) = cli.json(&["plan", "-o", "json", "--compare", "docker-prune"]);
    assert!(!unfiltered["both"].as_array().unwrap().is_empty());
    assert_eq!(compared["summary"], unfiltered["summary"]);
}

/// `safeprune --config POLICY ARGS` on a terminal of `columns` columns
/// (script(1)'s pseudo-terminal): what the terminal showed, its stdout
/// (stderr goes elsewhere: logs are not fitted), without the `\r`s.
fn on_a_terminal(cli: &Cli, columns: u16, args: &str) -> String {
    let line = format!(
        "stty cols {columns}; {} --config {} {args} 2>/dev/null",
        env!("CARGO_BIN_EXE_safeprune"),
        cli.policy_path().display()
    );
    let out = crate::util::pty::script(&line)
        .output()
        .expect("script runs (bsdutils; scripts/deps.sh installs it)");
    let shown = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert_eq!(out.status.code(), Some(0), "{line}: {shown}");
    shown
}

/// The longest line of `text`, in characters (`…` is one).
/// `text` with its heading's time (`… at 2026-11-28T05:50:03Z`) cut:
/// two plans a second apart are otherwise the same.
fn untimed(text: &str) -> String {
    let (heading, rest) = text.split_once('\n').unwrap_or((text, ""));
    let heading = heading.rsplit_once(" at ").map_or(heading, |(h, _)| h);
    format!("{heading}\n{rest}")
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_table_fits_the_terminal_and_keeps_its_full_width_when_piped() {
    let engine = PrivateDockerd::start().await;
    let cli = lay_out(&engine).await;
    // Piped: the full width, whatever COLUMNS says.
    let piped = table(&cli, &[]);
    assert!(widest(&piped) > 120, "the node's table is wide:\n{piped}");
    assert!(!piped.contains('…'), "{piped}");
    let out = cli
        .command(&["plan"])
        .env("COLUMNS", "40")
        .output()
        .unwrap();
    assert_eq!(
        untimed(&String::from_utf8(out.stdout).unwrap()),
        untimed(&piped)
    );

    for columns in [60, 80, 120] {
        let shown = on_a_terminal(&cli, columns, "plan");
        assert!(shown.contains("SUMMARY"), "{columns}: {shown}");
        assert!(
            widest(&shown) <= usize::from(columns),
            "{columns} columns:\n{shown}"
        );
        assert!(shown.contains('…'), "a cut cell says so:\n{shown}");
        for rule in ["eligible", "running", "in_use"] {
            assert!(shown.contains(rule), "{columns}: {rule}:\n{shown}");
        }
    }
    // The terminal's own width is used, not 80 whatever it is.
    assert!(widest(&on_a_terminal(&cli, 120, "plan")) > 80);
    // The comparison too.
    let shown = on_a_terminal(&cli, 80, "plan --compare docker-prune");
    assert!(shown.contains("SUMMARY"), "{shown}");
    assert!(widest(&shown) <= 80, "{shown}");
}
