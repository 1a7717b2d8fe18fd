//! The policy reader: the built-in default, every documented form of each
//! value, and the place and words of each refusal (kubelet's configuration,
//! the pace section and the corpus of bad policies in `tests/`).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::*;
use crate::inventory::Labels;

fn parse(yaml: &str) -> Result<Policy, PolicyError> {
    Policy::from_yaml(yaml, "test.yaml")
}

fn err(yaml: &str) -> String {
    parse(yaml)
        .expect_err("policy should be refused")
        .to_string()
}

#[test]
fn builtin_equals_an_empty_policy_with_all_defaults() {
    // The documented file and the serde defaults must say the same thing, or
    // a user who deletes a key gets a value the docs never showed.
    let from_file = Policy::builtin().to_yaml();
    let from_defaults = parse("{}").unwrap().to_yaml();
    assert_eq!(from_file, from_defaults);
}

#[test]
fn builtin_policy_has_the_documented_values() {
    let p = Policy::builtin();
    assert_eq!(p.runtime.kind, RuntimeChoice::Auto);
    assert_eq!(p.runtime.docker.endpoint, "unix:///var/run/docker.sock");
    assert_eq!(p.runtime.containerd.namespaces, vec!["k8s.io"]);
    assert_eq!(
        p.protect.labels[0].as_str(),
        "io.kubernetes.container.name=istio-init"
    );
    assert_eq!(p.containers.min_age, Age::hours(1));
    assert_eq!(p.images.mode, ImageMode::Unused);
    assert_eq!(p.images.min_age, Age::hours(24));
    assert!(!p.volumes.enabled);
    assert_eq!(p.volumes.min_age, Age::hours(168));
    assert_eq!(p.safety.max_deletions, 1000);
    assert_eq!(p.safety.concurrency, Concurrency::Auto);
    assert_eq!(p.lock_file, PathBuf::from("/run/safeprune.lock"));
    assert_eq!(p.timezone, Timezone::Utc);
    assert_eq!(p.schedule_jitter, Age::zero());
}

#[test]
fn printed_policy_parses_back_to_itself() {
    let printed = Policy::builtin().to_yaml();
    assert_eq!(parse(&printed).unwrap().to_yaml(), printed);
}

#[test]
fn unknown_key_names_the_key_line_and_column() {
    let e = err("version: 1\nimages:\n  enabled: true\n  kep: []\n");
    assert!(e.contains("test.yaml"), "{e}");
    assert!(e.contains("unknown field `kep`"), "{e}");
    assert!(e.contains("line 4 column 3"), "{e}");
}

#[test]
fn durations_accept_the_documented_forms() {
    for (text, secs) in [
        ("90m", 5400),
        ("1h30m", 5400),
        ("7d", 604_800),
        ("45s", 45),
        ("0", 0),
        ("2w", 1_209_600),
    ] {
        assert_eq!(
            Age::from_str(text).unwrap().as_duration().num_seconds(),
            secs,
            "{text}"
        );
    }
}

#[test]
fn the_default_policy_names_every_duration_form_it_accepts() {
    // The comment a user reads first lists the forms; each must parse, and
    // each form the parser accepts (s, m, h, d, w, 0) must be listed.
    let line = DEFAULT_POLICY_YAML
        .lines()
        .find_map(|l| l.strip_prefix("# Durations: "))
        .expect("config/policy.yaml lists the duration forms");
    let forms: Vec<&str> = line.trim_end_matches('.').split(", ").collect();
    for form in &forms {
        assert!(Age::from_str(form).is_ok(), "{form} is listed but refused");
    }
    for unit in ['s', 'm', 'h', 'd', 'w'] {
        assert!(
            forms.iter().any(|f| f.ends_with(unit)),
            "no {unit} form in {line}"
        );
    }
    assert!(forms.contains(&"0"), "{line}");
}

#[test]
fn bad_durations_are_refused_with_their_location() {
    for bad in ["1x", "h", "10", "-1h", "1.5h", "", "1h 30m"] {
        assert!(Age::from_str(bad).is_err(), "{bad:?} should be refused");
    }
    let e = err("containers:\n  min_age: 10 minutes\n");
    assert!(
        e.contains("\"10 minutes\" is not a duration (use 10m)"),
        "{e}"
    );
    assert!(e.contains("line 2 column 12"), "{e}");
}

#[test]
fn durations_print_in_hours_and_minutes() {
    assert_eq!(Age::from_str("7d").unwrap().to_string(), "168h");
    assert_eq!(Age::from_str("90m").unwrap().to_string(), "1h30m");
    assert_eq!(Age::from_str("0").unwrap().to_string(), "0");
}

#[test]
fn schedule_must_be_a_crontab_line() {
    assert!(parse("schedule: \"*/5 * * * *\"").is_ok());
    assert!(parse("schedule: \"0 5 * * 7\"").is_ok());
    let e = err("schedule: \"0 5 * *\"\n");
    assert!(e.contains("got 4"), "{e}");
    assert!(e.contains("line 1"), "{e}");
    assert!(err("schedule: \"61 5 * * 4\"").contains("minute 61 is out of range"));
    assert!(err("schedule: \"0 5 * * 4 2030 1\"").contains("got 7"));
}

#[test]
fn bad_glob_is_refused() {
    let e = err("images:\n  keep: [\"registry.k8s.io/pause:[\"]\n");
    assert!(e.contains("invalid glob"), "{e}");
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn label_rules_match_key_or_key_and_glob_value() {
    let labels: Labels = [
        (
            "io.kubernetes.container.name".to_owned(),
            "istio-init".to_owned(),
        ),
        ("team".to_owned(), String::new()),
    ]
    .into();
    let rule = |s: &str| LabelRule::from_str(s).unwrap();
    assert_eq!(
        rule("io.kubernetes.container.name=istio-*")
            .matches(&labels)
            .as_deref(),
        Some("io.kubernetes.container.name=istio-init")
    );
    assert!(
        rule("io.kubernetes.container.name=app")
            .matches(&labels)
            .is_none()
    );
    assert_eq!(rule("team").matches(&labels).as_deref(), Some("team="));
    assert!(rule("team=").matches(&labels).is_some());
    assert!(rule("missing").matches(&labels).is_none());
    assert!(LabelRule::from_str("=x").is_err());
    assert!(LabelRule::from_str("").is_err());
}

#[test]
fn wrong_types_and_enums_are_refused() {
    assert!(err("containers:\n  enabled: maybe\n").contains("line 2"));
    assert!(err("runtime:\n  kind: podman\n").contains("unknown variant `podman`"));
    assert!(err("timezone: Europe/Paris\n").contains("unknown variant"));
    assert!(err("version: 2\n").contains("unsupported policy version 2"));
    assert!(err("safety:\n  concurrency: 0\n").contains("out of range"));
    assert!(err("images:\n  mode: all\n").contains("unknown variant `all`"));
}

#[test]
fn source_prefers_flag_then_env() {
    let flag = Path::new("/a.yaml");
    assert_eq!(
        PolicySource::resolve(Some(flag), Some("/b.yaml")),
        PolicySource::File(flag.into())
    );
    assert_eq!(
        PolicySource::resolve(None, Some("/b.yaml")),
        PolicySource::File("/b.yaml".into())
    );
}

#[test]
fn top_level_and_unquoted_values_are_located() {
    let e = err("version: 1\nschedule: \"0 5 * *\"\n");
    assert!(e.contains("line 2 column 11"), "{e}");
    assert_eq!(
        parse("containers:\n  min_age: 0\n")
            .unwrap()
            .containers
            .min_age,
        Age::from_str("0").unwrap()
    );
}

#[test]
fn metrics_listen_is_off_by_default_and_takes_ip_and_port() {
    assert_eq!(Policy::builtin().metrics.listen.addr(), None);
    for (text, addr) in [
        ("0.0.0.0:9573", "0.0.0.0:9573"),
        ("127.0.0.1:0", "127.0.0.1:0"),
        ("\"[::]:9573\"", "[::]:9573"),
    ] {
        let p = parse(&format!("metrics: {{ listen: {text} }}")).unwrap();
        assert_eq!(
            p.metrics.listen.addr(),
            Some(addr.parse().unwrap()),
            "{text}"
        );
        // What check prints reads back as the same address.
        let printed = parse(&p.to_yaml()).unwrap();
        assert_eq!(printed.metrics.listen, p.metrics.listen, "{text}");
    }
    assert_eq!(
        parse("metrics: { listen: \"\" }")
            .unwrap()
            .metrics
            .listen
            .addr(),
        None
    );
}

#[test]
fn metrics_listen_refuses_what_is_not_ip_and_port() {
    for text in [
        "localhost:9573",
        "9573",
        "\"0.0.0.0\"",
        "\"http://0.0.0.0:9573\"",
    ] {
        let e = err(&format!("metrics: {{ listen: {text} }}"));
        assert!(e.contains("is not IP:port"), "{text}: {e}");
        // The value's own position, after "metrics: { listen: ".
        assert!(e.contains("line 1 column 20"), "{text}: {e}");
    }
}

#[test]
fn a_schedule_that_never_fires_is_refused_where_it_is_written() {
    for line in ["0 5 30 2 *", "0 5 31 4 *", "0 0 31 2,4,6,9,11 *"] {
        let e = err(&format!("version: 1\nschedule: \"{line}\"\n"));
        assert!(
            e.contains(&format!("schedule: \"{line}\": day-of-month 3")),
            "{e}"
        );
        assert!(e.ends_with("at line 2 column 11"), "{e}");
    }
    // Rare is not never: 29 February comes every four years.
    parse("schedule: \"0 5 29 2 *\"").unwrap();
}

#[test]
fn disk_watermarks_default_validate_and_may_be_null() {
    assert_eq!(Policy::builtin().images.disk, None);
    assert_eq!(parse("images: {disk: null}").unwrap().images.disk, None);
    assert_eq!(
        parse("images: {disk: {}}").unwrap().images.disk,
        Some(DiskWatermarks::percents(85, 70))
    );
    assert_eq!(
        parse("images: {disk: {high_percent: 80, low_percent: 0}}")
            .unwrap()
            .images
            .disk,
        Some(DiskWatermarks::percents(80, 0))
    );
    for bad in [
        "{high_percent: 70, low_percent: 70}",
        "{high_percent: 60, low_percent: 70}",
        "{high_percent: 101, low_percent: 70}",
    ] {
        let e = err(&format!("images:\n  disk: {bad}\n"));
        assert!(e.contains("images: disk watermarks"), "{bad}: {e}");
        assert!(e.ends_with(" at line 2 column 3"), "{bad}: {e}");
    }
    assert!(err("images: {disk: {high: 80}}").contains("unknown field `high`"));
    let e = err("images:\n  disk: {high_percent: 90, low_percent: -1}\n");
    assert!(e.contains("images.disk.low_percent: -1 is negative"), "{e}");
}

#[test]
fn keep_recent_and_state_dir_have_their_defaults() {
    let p = Policy::builtin();
    assert_eq!(p.images.keep_recent, 0);
    assert_eq!(p.state_dir, PathBuf::from("/var/lib/safeprune"));
    assert_eq!(
        parse("images: {keep_recent: 2}")
            .unwrap()
            .images
            .keep_recent,
        2
    );
    let e = err("state_dir: var/lib/safeprune");
    assert!(
        e.contains("state_dir: path 'var/lib/safeprune' is not absolute"),
        "{e}"
    );
    assert!(err("images: {keep_recent: -1}").contains("images.keep_recent"));
}

#[test]
fn a_string_that_may_be_any_text_is_not_taken_from_a_bool_or_a_number() {
    // Once `labels: [true]` was the label key "true", `keep: [1.10]`
    // the glob "1.1".
    for (text, says, column) in [
        (
            "protect: {labels: [true]}\n",
            "protect.labels[0]: expected a string, and YAML reads this unquoted value as the \
             boolean true: quote it if it is meant as text",
            20,
        ),
        (
            "images: {keep: [5]}\n",
            "images.keep[0]: expected a string",
            17,
        ),
        ("images: {keep: [1.10]}\n", "as the number 1.1:", 17),
        ("volumes: {keep_labels: [0x10]}\n", "as the number 16:", 25),
        (
            "runtime: {containerd: {namespaces: [-1]}}\n",
            "runtime.containerd.namespaces[0]: expected a string, and YAML reads this unquoted \
             value as the number -1",
            37,
        ),
        (
            "runtime: {containerd: {namespaces: [.inf]}}\n",
            "as the number inf:",
            37,
        ),
    ] {
        let e = err(text);
        assert!(e.contains(says), "{text:?}: {e}");
        assert!(
            e.ends_with(&format!("at line 1 column {column}")),
            "{text:?}: {e}"
        );
    }
    let quoted = parse(
        "protect: {labels: [\"true\"]}\nimages: {keep: ['5']}\n\
         runtime: {containerd: {namespaces: [\"1.10\"]}}\n",
    )
    .unwrap();
    assert_eq!(quoted.protect.labels[0].as_str(), "true");
    assert_eq!(quoted.images.keep[0].as_str(), "5");
    assert_eq!(quoted.runtime.containerd.namespaces, ["1.10"]);
    // A value with its own syntax says what is wrong with it instead, and
    // `0` is a duration.
    assert!(err("lock_file: true\n").contains("path 'true' is not absolute"));
    parse("containers: {min_age: 0}\n").unwrap();
}

#[test]
fn a_crontab_field_with_an_empty_list_entry_is_refused() {
    // croner reads `1,` as `1`: "1, 5 * * *" would run at 05:01.
    for line in ["1, 5 * * *", "1,,5 5 * * *", ",1 5 * * *", "0 5 * * MON,"] {
        let e = Schedule::from_str(line).unwrap_err();
        assert!(e.contains("has an empty list entry"), "{line}: {e}");
    }
    let e = err("schedule: \"1, 5 * * *\"\n");
    assert!(
        e.ends_with(
            "schedule: \"1, 5 * * *\": minute 1, has an empty list entry (write a list with no \
             spaces or stray commas, e.g. 1,5) at line 1 column 11"
        ),
        "{e}"
    );
    Schedule::from_str("1,5 * * * *").unwrap();
    Schedule::from_str("0 5 * * MON,THU").unwrap();
}

#[test]
fn a_crontab_line_spaced_with_other_than_plain_spaces_is_refused() {
    for (line, code) in [
        ("0\u{a0}5 * * 4", "U+00A0"),
        ("0 5\u{2003}* * 4", "U+2003"),
        ("0 5 * * 4\u{3000}", "U+3000"),
        ("0 5 * * 4\r", "U+000D"),
    ] {
        let e = Schedule::from_str(line).unwrap_err();
        assert!(
            e.ends_with(&format!(
                "{code} is not a plain space (separate the fields with spaces)"
            )),
            "{line:?}: {e}"
        );
    }
    let e = Schedule::from_str("0 5 * * 4\u{1}").unwrap_err();
    assert_eq!(
        e,
        "\"0 5 * * 4\\u{1}\": U+0001 is not plain ASCII (write the line as in a crontab, e.g. \
         \"0 5 * * 4\")"
    );
    let e = err("version: 1\nschedule: \"0\u{a0}5 * * 4\"\n");
    assert!(e.ends_with("at line 2 column 11"), "{e}");
    // Tabs and a block scalar's final line feed are plain spacing.
    Schedule::from_str("0\t5 * * 4").unwrap();
    Schedule::from_str("0 5 * * 4\n").unwrap();
}

#[test]
fn a_control_character_in_a_value_is_refused_where_the_value_is() {
    for (text, path, column) in [
        ("images: {keep: [\"a\\u0001*\"]}\n", "images.keep[0]", 17),
        (
            "protect: {labels: [\"k=\\x07\"]}\n",
            "protect.labels[0]",
            20,
        ),
        (
            "runtime: {containerd: {namespaces: [\"k8s\\u0001io\"]}}\n",
            "runtime.containerd.namespaces[0]",
            37,
        ),
        (
            "report: {json_path: \"/tmp/\\u0001.json\"}\n",
            "report.json_path",
            21,
        ),
    ] {
        let e = err(text);
        assert!(
            e.contains(&format!("{path}: the value holds a control character")),
            "{text:?}: {e}"
        );
        assert!(
            e.ends_with(&format!("at line 1 column {column}")),
            "{text:?}: {e}"
        );
    }
    assert!(err("images: {keep: [\"\\e\"]}\n").contains("(U+001B): remove it"));
    // A value's own check comes first: a NUL is no path, no socket.
    assert!(err("lock_file: \"/run/\\0\"\n").contains("contains a NUL byte"));
    // Tab and line feed are spacing.
    parse("images: {keep: [\"a\\tb\"]}\nschedule: |\n  0 5 * * 4\n").unwrap();
}

#[test]
fn a_fault_at_the_first_character_of_the_file_is_located() {
    // yaml_serde prints no place for line 1 column 1.
    for text in ["bogus: 1\n", "\u{feff}bogus: 1\n", "\"\\u0001\": 1\n"] {
        let e = err(text);
        assert!(e.contains("unknown field `"), "{text:?}: {e}");
        assert!(e.ends_with(" at line 1 column 1"), "{text:?}: {e}");
    }
    assert!(err("version: 1\nbogus: 1\n").ends_with("`state_dir` at line 2 column 1"));
}

mod kubelet;
mod pace;
mod refusals;

#[test]
fn keep_unpullable_is_auto_true_or_false() {
    assert_eq!(
        Policy::builtin().images.keep_unpullable,
        KeepUnpullable::Auto
    );
    for (yaml, want) in [
        ("images: {keep_unpullable: auto}", KeepUnpullable::Auto),
        ("images: {keep_unpullable: true}", KeepUnpullable::Always),
        ("images: {keep_unpullable: false}", KeepUnpullable::Never),
    ] {
        let p = parse(yaml).unwrap();
        assert_eq!(p.images.keep_unpullable, want, "{yaml}");
        // It reads back as written.
        let again = parse(&p.to_yaml()).unwrap();
        assert_eq!(again.images.keep_unpullable, want, "{yaml}");
    }
    let e = err("images: {keep_unpullable: maybe}");
    assert!(
        e.contains("images.keep_unpullable")
            && e.contains("\"maybe\" is not one of auto, true or false"),
        "{e}"
    );
    let e = err("images: {keep_unpullable: 1}");
    assert!(e.contains("not one of auto, true or false"), "{e}");
    assert!(KeepUnpullable::Auto.keeps(true) && !KeepUnpullable::Auto.keeps(false));
    assert!(KeepUnpullable::Always.keeps(false) && !KeepUnpullable::Never.keeps(true));
}
