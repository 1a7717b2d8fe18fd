//! The corpus of bad policies, each refusal whole.

use super::*;

/// Bad policies and their refusals, whole. Every refusal names
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
         `keep`, `keep_recent`, `disk`, `keep_unpullable` (did you mean `keep_recent`?) at line 2 column 3",
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
