//! Property tests of the policy reader: no input makes it panic,
//! and what it accepts stays within the documented bounds.
//!
//! Inputs come from three sources: arbitrary text; sequences of the tokens
//! YAML's structure is made of (brackets, anchors, aliases, nulls, tabs,
//! document markers, the policy's own keys); and the default policy with
//! lines dropped, doubled or changed.

use std::fmt::Write;

use proptest::prelude::*;

use super::*;

/// Tokens that build (and break) YAML structure.
const TOKENS: [&str; 34] = [
    "[",
    "]",
    "{",
    "}",
    ":",
    ": ",
    "- ",
    ",",
    "\n",
    "  ",
    "\t",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "~",
    "null",
    "\"",
    "'",
    "#",
    "---\n",
    "...\n",
    "? ",
    "!!null ",
    "!!str ",
    "\u{feff}",
    "images",
    "keep",
    "protect",
    "labels",
    "x=y",
    "a*",
    "0 5 30 2 *",
    "\\0",
];

fn token_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&TOKENS[..]), 0..200)
        .prop_map(|tokens| tokens.concat())
}

/// The default policy, each line kept (most often), dropped, doubled or
/// replaced by a token.
fn mutated_default() -> impl Strategy<Value = String> {
    let lines: Vec<&'static str> = DEFAULT_POLICY_YAML.lines().collect();
    let n = lines.len();
    (
        prop::collection::vec(0..40_u8, n),
        prop::collection::vec(prop::sample::select(&TOKENS[..]), n),
    )
        .prop_map(move |(edits, tokens)| {
            let mut out = String::new();
            for ((line, edit), token) in lines.iter().zip(edits).zip(tokens) {
                match edit {
                    37 => {}
                    38 => {
                        out.push_str(line);
                        out.push('\n');
                        out.push_str(line);
                    }
                    39 => out.push_str(token),
                    _ => out.push_str(line),
                }
                out.push('\n');
            }
            out
        })
}

/// What an accepted policy must satisfy whatever it was read from.
fn within_bounds(policy: &Policy) {
    let patterns = policy
        .images
        .keep
        .iter()
        .map(Pattern::as_str)
        .chain(policy.protect.labels.iter().map(LabelRule::as_str))
        .chain(policy.volumes.keep_labels.iter().map(LabelRule::as_str));
    for p in patterns {
        assert!(p.chars().count() <= MAX_PATTERN_CHARS, "{p}");
    }
    assert!(policy.images.keep.len() <= scan::MAX_LIST_ENTRIES);
    assert!(policy.protect.labels.len() <= scan::MAX_LIST_ENTRIES);
    assert!(policy.lock_file.is_absolute());
    for path in [
        &policy.report.json_path,
        &policy.report.metrics_textfile,
        &policy.report.audit_log,
    ] {
        assert!(path.is_empty() || path.starts_with('/'), "{path}");
    }
    for endpoint in [
        &policy.runtime.docker.endpoint,
        &policy.runtime.containerd.endpoint,
    ] {
        assert!(
            endpoint
                .strip_prefix("unix://")
                .unwrap_or(endpoint)
                .starts_with('/'),
            "{endpoint}"
        );
    }
    assert!(
        policy
            .schedule
            .cron()
            .find_next_occurrence(&chrono::Utc::now(), false)
            .is_ok(),
        "{}",
        policy.schedule.as_str()
    );
}

fn read(text: &str) {
    if let Ok(policy) = Policy::from_yaml(text, "prop.yaml") {
        within_bounds(&policy);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,2000}") {
        read(&text);
    }

    #[test]
    fn yaml_structure_never_panics_and_accepted_policies_stay_in_bounds(text in token_text()) {
        read(&text);
    }

    #[test]
    fn an_edited_default_never_panics_and_stays_in_bounds(text in mutated_default()) {
        read(&text);
    }

    #[test]
    fn any_file_bytes_are_read_or_refused_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(policy) = Policy::load(&path) {
            within_bounds(&policy);
        }
    }
}

/// Set in the process [`the_largest_hostile_inputs_stay_under_100_mb`]
/// starts to measure itself.
const ALONE: &str = "SAFEPRUNE_TEST_MEMORY_ALONE";

/// The hostile shapes at their largest stay far under 100 MB: measured as
/// the peak resident memory of a process that runs this test alone (the
/// test binary again, this test its only one), so that other tests of the
/// same process (`cargo test` runs them all in one) do not count.
#[test]
fn the_largest_hostile_inputs_stay_under_100_mb() {
    if std::env::var_os(ALONE).is_none() {
        let name = "policy::props::the_largest_hostile_inputs_stay_under_100_mb";
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the test alone failed:\n{said}");
        assert!(
            said.contains("peak "),
            "the test alone did not run:\n{said}"
        );
        return;
    }
    let nested = format!("a: {}{}", "[".repeat(500_000), "]".repeat(500_000));
    let entries = format!("a: [{}]", vec!["x"; 500_000].join(","));
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..60 {
        let refs = vec![format!("*a{}", level - 1); 10].join(", ");
        writeln!(bomb, "a{level}: &a{level} [{refs}]").unwrap();
    }
    let mut globs = String::from("images:\n  keep:\n");
    for i in 0..256 {
        writeln!(globs, "    - \"{}{i:04}\"", "a*".repeat(510)).unwrap();
    }
    for text in [&nested, &entries, &bomb, &globs] {
        let _ = Policy::from_yaml(text, "big.yaml");
    }
    // The peak of this process's own memory since its exec (VmHWM, in
    // KiB): `getrusage`'s `ru_maxrss` would carry the peak of the process
    // that forked it, the whole `cargo test` one.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    println!("peak {peak_kib} KiB");
    assert!(peak_kib < 100 * 1024, "peak {peak_kib} KiB");
}
