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
    // Issue 22: `labels: [true]` was the label key "true", `keep: [1.10]`
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

/// A kubelet configuration in a directory of its own.
fn kubelet_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn from_kubelet_derives_the_watermarks_and_prints_back_as_written() {
    let (_dir, path) = kubelet_file(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         imageGCHighThresholdPercent: 90\nimageMinimumGCAge: 10m\n",
    );
    let yaml = format!("images:\n  disk:\n    from_kubelet: {}\n", path.display());
    let p = parse(&yaml).unwrap();
    let disk = p.images.disk.as_ref().unwrap();
    assert_eq!((disk.high_percent, disk.low_percent), (85, 75));
    let kubelet = p.kubelet().unwrap();
    assert_eq!(kubelet.path, path);
    assert_eq!(kubelet.minimum_gc_age.value, Age::minutes(10));
    // `check` prints the key as written, which reads back the same.
    let printed = p.to_yaml();
    assert!(
        printed.contains(&format!("disk:\n    from_kubelet: {}\n", path.display())),
        "{printed}"
    );
    assert_eq!(parse(&printed).unwrap().images.disk, p.images.disk);
    // The summary says which floor applies.
    let summary = p.kubelet_summary().unwrap();
    assert!(
        summary.ends_with("(images.min_age 24h is the stricter, and applies)"),
        "{summary}"
    );
    let yaml = format!("{yaml}  min_age: 1m\n");
    assert!(
        !parse(&yaml)
            .unwrap()
            .kubelet_summary()
            .unwrap()
            .contains("stricter")
    );
}

#[test]
fn from_kubelet_true_reads_kubeadms_path() {
    match parse("images: {disk: {from_kubelet: true}}") {
        Ok(p) => assert_eq!(p.kubelet().unwrap().path, Path::new(KUBELET_CONFIG_PATH)),
        Err(e) => assert!(
            e.to_string()
                .contains("cannot use kubelet's configuration /var/lib/kubelet/config.yaml"),
            "{e}"
        ),
    }
}

#[test]
fn from_kubelet_refuses_what_it_cannot_use() {
    let e = err("images:\n  disk:\n    from_kubelet: /nonexistent/kubelet.yaml\n");
    assert!(
        e.starts_with(
            "invalid policy test.yaml: images: cannot use kubelet's configuration \
             /nonexistent/kubelet.yaml (images.disk.from_kubelet): no such file: give the path \
             of kubelet's --config file, or write images.disk.high_percent and low_percent \
             instead"
        ),
        "{e}"
    );
    assert!(e.ends_with(" at line 2 column 3"), "{e}");
    let (_dir, path) = kubelet_file("apiVersion: v1\nkind: ConfigMap\n");
    let e = err(&format!(
        "images: {{disk: {{from_kubelet: {}}}}}",
        path.display()
    ));
    assert!(e.contains("it is not a kubelet configuration"), "{e}");
    for (disk, says) in [
        (
            "{from_kubelet: /k.yaml, high_percent: 90}",
            "write either from_kubelet or the percents, not both",
        ),
        ("{from_kubelet: false}", "from_kubelet: false says nothing"),
        ("{from_kubelet: kubelet.yaml}", "is not absolute"),
        (
            "{from_kubelet: 5}",
            "5 is not a path (write the absolute path of kubelet's configuration, or true for \
             /var/lib/kubelet/config.yaml)",
        ),
    ] {
        let e = err(&format!("images: {{disk: {disk}}}"));
        assert!(e.contains(says), "{disk}: {e}");
    }
    let e = err("images:\n  disk:\n    from_kubelet:\n");
    assert!(e.contains("has no value"), "{e}");
}

#[test]
fn a_run_reads_kubelets_configuration_again() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let (_dir, path) = kubelet_file(head);
    let p = parse(&format!(
        "images: {{disk: {{from_kubelet: {}}}}}",
        path.display()
    ))
    .unwrap();
    assert!(p.kubelet_reread().unwrap().is_none(), "nothing changed");
    // kubelet restarted with new thresholds: the watermarks follow.
    std::fs::write(&path, format!("{head}imageGCHighThresholdPercent: 95\n")).unwrap();
    let again = p.kubelet_reread().unwrap().expect("the thresholds changed");
    let disk = again.images.disk.as_ref().unwrap();
    assert_eq!((disk.high_percent, disk.low_percent), (90, 75));
    // Gone: the run fails, naming the file.
    std::fs::remove_file(&path).unwrap();
    let e = p.kubelet_reread().unwrap_err();
    assert!(matches!(e, PolicyError::Kubelet { .. }), "{e}");
    assert!(e.to_string().contains("no such file"), "{e}");
    // Without from_kubelet nothing is read.
    let plain = Policy::builtin();
    assert!(plain.kubelet_reread().unwrap().is_none());
}

/// Issue 37: bad policies and their refusals, whole. Every refusal names
/// the key, the value as written, what would be right, and the place. Each
/// line here read differently before: serde's or croner's words (`expected
/// u64`, `Component error: Number out of bounds.`), or no suggestion.
const BAD_POLICIES: &[(&str, &str)] = &[
    // Crontab lines: the field, its value and what it takes.
    (
        "version: 1\nschedule: \"61 * * * *\"\n",
        "schedule: \"61 * * * *\": minute 61 is out of range (0-59) at line 2 column 11",
    ),
    (
        "schedule: \"0 24 * * *\"",
        "schedule: \"0 24 * * *\": hour 24 is out of range (0-23) at line 1 column 11",
    ),
    (
        "schedule: \"0 5 32 * *\"",
        "schedule: \"0 5 32 * *\": day-of-month 32 is out of range (1-31) at line 1 column 11",
    ),
    (
        "schedule: \"0 5 * 13 *\"",
        "schedule: \"0 5 * 13 *\": month 13 is out of range (1-12 or JAN-DEC) at line 1 \
         column 11",
    ),
    (
        "schedule: \"0 5 * * 8\"",
        "schedule: \"0 5 * * 8\": day-of-week 8 is out of range (0-7 or SUN-SAT) at line 1 \
         column 11",
    ),
    (
        "schedule: \"0 5 * * THURSDAY\"",
        "schedule: \"0 5 * * THURSDAY\": day-of-week THURSDAY is not a day of the week (0-7 \
         or SUN-SAT; did you mean THU?) at line 1 column 11",
    ),
    (
        "schedule: \"1-2-3 5 * * *\"",
        "schedule: \"1-2-3 5 * * *\": minute 1-2-3 is not a range (write start-end, e.g. \
         0-4) at line 1 column 11",
    ),
    (
        "schedule: \"0 22-2 * * *\"",
        "schedule: \"0 22-2 * * *\": hour range 22-2 goes backwards (write 2-22, or a list \
         to wrap around: 22-23,0-2) at line 1 column 11",
    ),
    (
        "schedule: \"*/0 5 * * *\"",
        "schedule: \"*/0 5 * * *\": minute */0: a step of 0 never moves on (write */1 or \
         more) at line 1 column 11",
    ),
    (
        "schedule: \"0 5 * *\"",
        "schedule: \"0 5 * *\": write 5 fields (minute hour day-of-month month \
         day-of-week), or 6 with seconds first; got 4 at line 1 column 11",
    ),
    (
        "schedule: \"0 0 30 2 *\"",
        "schedule: \"0 0 30 2 *\": day-of-month 30 never occurs in February at line 1 \
         column 11",
    ),
    (
        "schedule: \"0 0 31 4 *\"",
        "schedule: \"0 0 31 4 *\": day-of-month 31 never occurs in April at line 1 column 11",
    ),
    (
        "schedule: \"0 0 31 2,APR,6,9,11 *\"",
        "schedule: \"0 0 31 2,APR,6,9,11 *\": day-of-month 31 never occurs in February, \
         April, June, September or November at line 1 column 11",
    ),
    // Durations: the value, and the duration it likely means.
    (
        "safety:\n  pace:\n    max_delay: 10\n",
        "safety.pace.max_delay: 10 is not a duration (use 10s, 10m, 10h) at line 3 column 16",
    ),
    (
        "containers:\n  min_age: 10\n",
        "containers.min_age: 10 is not a duration (use 10s, 10m, 10h) at line 2 column 12",
    ),
    (
        "images:\n  min_age: 1.5h\n",
        "images.min_age: 1.5h is not a duration (use 1h30m) at line 2 column 12",
    ),
    (
        "images:\n  min_age: 1h 30m\n",
        "images.min_age: \"1h 30m\" is not a duration (use 1h30m) at line 2 column 12",
    ),
    (
        "volumes:\n  min_age: 7 days\n",
        "volumes.min_age: \"7 days\" is not a duration (use 7d) at line 2 column 12",
    ),
    (
        "networks:\n  min_age: -1h\n",
        "networks.min_age: -1h is not a duration (a duration is never negative: use 1h, or \
         0) at line 2 column 12",
    ),
    (
        "schedule_jitter: 5x\n",
        "schedule_jitter: 5x is not a duration (x is not a unit: use s, m, h, d or w, as in \
         1h30m) at line 1 column 18",
    ),
    (
        "safety:\n  max_plan_age: soon\n",
        "safety.max_plan_age: soon is not a duration (write a number with a unit: 90m, \
         1h30m, 7d, 45s, or 0) at line 2 column 17",
    ),
    // Text where a number is expected, and numbers that are not whole.
    (
        "safety:\n  max_deletions: 10s\n",
        "safety.max_deletions: 10s is not a whole number (write e.g. 1000) at line 2 \
         column 18",
    ),
    (
        "safety:\n  max_deletions: 2.5\n",
        "safety.max_deletions: 2.5 is not a whole number (use 2 or 3) at line 2 column 18",
    ),
    (
        "safety:\n  max_deletions: \"100\"\n",
        "safety.max_deletions: \"100\" is text, not a whole number (write 100 without \
         quotes) at line 2 column 18",
    ),
    (
        "safety:\n  max_deletions: 99999999999999999999999\n",
        "safety.max_deletions: 99999999999999999999999 is too large (write e.g. 1000) at \
         line 2 column 18",
    ),
    (
        "safety:\n  concurrency: 1.5\n",
        "safety.concurrency: concurrency 1.5 is not a whole number: use 1 to 64, or auto at \
         line 2 column 16",
    ),
    (
        "safety:\n  concurrency: true\n",
        "safety.concurrency: concurrency true is not a number: use 1 to 64, or auto at line \
         2 column 16",
    ),
    (
        "safety:\n  pace:\n    io_pressure_percent: high\n",
        "safety.pace.io_pressure_percent: high is not a number (write e.g. 10) at line 3 \
         column 26",
    ),
    (
        "safety:\n  pace:\n    io_pressure_percent: 10%\n",
        "safety.pace.io_pressure_percent: 10% is not a number (write 10, without %) at line \
         3 column 26",
    ),
    (
        "images:\n  keep_recent: two\n",
        "images.keep_recent: two is not a whole number (write e.g. 2, or 0 for none) at \
         line 2 column 16",
    ),
    (
        "images:\n  keep_recent: 5000000000\n",
        "images.keep_recent: 5000000000 is too large (write e.g. 2) at line 2 column 16",
    ),
    (
        "images:\n  disk:\n    high_percent: 85%\n",
        "images.disk.high_percent: 85% is not a whole number (write 85, without %) at line \
         3 column 19",
    ),
    (
        "version: 1.0\n",
        "version: 1.0 is not a whole number (write 1) at line 1 column 10",
    ),
    // Booleans, lists and sections of the wrong type.
    (
        "containers:\n  enabled: maybe\n",
        "containers.enabled: maybe is not a boolean (write true or false) at line 2 column 12",
    ),
    (
        "volumes:\n  anonymous_only: yes\n",
        "volumes.anonymous_only: yes is not a boolean (write true) at line 2 column 19",
    ),
    (
        "images:\n  keep: registry.k8s.io/pause:*\n",
        "images.keep: registry.k8s.io/pause:* is not a list (write \
         [registry.k8s.io/pause:*], or `- registry.k8s.io/pause:*` on the line below the \
         key) at line 2 column 9",
    ),
    (
        "containers: 5\n",
        "containers: 5 is not a mapping of keys (write its keys below it, indented, or {} \
         for its defaults) at line 1 column 13",
    ),
    // An unknown key or value: the close one.
    (
        "images:\n  keep_recnet: 2\n",
        "images: unknown field `keep_recnet`, expected one of `enabled`, `mode`, `min_age`, \
         `keep`, `keep_recent`, `disk` (did you mean `keep_recent`?) at line 2 column 3",
    ),
    (
        "shedule: \"0 5 * * 4\"\n",
        "unknown field `shedule`, expected one of `version`, `runtime`, `schedule`, \
         `schedule_jitter`, `timezone`, `protect`, `containers`, `images`, `volumes`, \
         `networks`, `build_cache`, `safety`, `report`, `metrics`, `lock_file`, `state_dir` \
         (did you mean `schedule`?) at line 1 column 1",
    ),
    (
        "safety:\n  pace:\n    max_dealy: 5m\n",
        "safety.pace: unknown field `max_dealy`, expected one of \
         `added_io_pressure_percent`, `io_pressure_percent`, `max_delay`, `on_max_delay`, \
         `workloads_cgroup` (did you mean `max_delay`?) at line 3 column 5",
    ),
    (
        "safety:\n  pace:\n    added_io_pressure_percent: half\n",
        "safety.pace.added_io_pressure_percent: half is not a number (write e.g. 0.5) at \
         line 3 column 32",
    ),
    (
        "safety:\n  pace:\n    on_max_delay: wait\n",
        "safety.pace.on_max_delay: unknown variant `wait`, expected `continue` or `stop` at \
         line 3 column 19",
    ),
    (
        "safety:\n  pace:\n    workloads_cgroup: kubepods.slice\n",
        "safety.pace.workloads_cgroup: path 'kubepods.slice' is not absolute: write the full \
         path, starting with '/', or write auto or node at line 3 column 23",
    ),
    (
        "runtime:\n  kind: dokcer\n",
        "runtime.kind: unknown variant `dokcer`, expected one of `auto`, `docker`, \
         `containerd`, `cri` (did you mean `docker`?) at line 2 column 9",
    ),
    (
        "images:\n  mode: unsued\n",
        "images.mode: unknown variant `unsued`, expected `dangling` or `unused` (did you \
         mean `unused`?) at line 2 column 9",
    ),
    (
        "timezone: utc\n",
        "timezone: unknown variant `utc`, expected `UTC` or `local` (did you mean `UTC`?) \
         at line 1 column 11",
    ),
];

#[test]
fn every_policy_error_says_what_to_write_and_where() {
    for (yaml, says) in BAD_POLICIES {
        assert_eq!(
            err(yaml),
            format!("invalid policy test.yaml: {says}"),
            "{yaml:?}"
        );
    }
    // Nothing close, nothing suggested.
    let e = err("runtime:\n  kind: podman\n");
    assert!(e.ends_with("`cri` at line 2 column 9"), "{e}");
}

mod pace;
