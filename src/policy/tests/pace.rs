//! `safety.pace`: on by default, its keys, what a policy written for the
//! absolute threshold means, and what `check` prints of it.

use super::*;

#[test]
fn pace_is_on_by_default_at_a_tenth_of_a_point_by_the_pods_cgroup() {
    let builtin = Policy::builtin().safety.pace.unwrap();
    assert_eq!(builtin, Pace::default());
    assert!((builtin.added_io_pressure_percent - 0.1).abs() < f64::EPSILON);
    assert!((builtin.io_pressure_percent - 10.0).abs() < f64::EPSILON);
    assert_eq!(builtin.max_delay.to_string(), "10m");
    assert_eq!(builtin.on_max_delay, OnMaxDelay::Continue);
    assert_eq!(builtin.workloads_cgroup, WorkloadsCgroup::Auto);
    assert!(!builtin.ceiling_only);
    // Left out, or written empty: the same defaults. `null`: off.
    assert_eq!(
        parse("safety: {}").unwrap().safety.pace,
        Some(Pace::default())
    );
    assert_eq!(
        parse("safety: {pace: {}}").unwrap().safety.pace,
        Some(Pace::default())
    );
    assert_eq!(parse("safety: {pace: null}").unwrap().safety.pace, None);
    for bad in ["0", "100", "-3", ".nan"] {
        let e = err(&format!(
            "safety:\n  pace: {{io_pressure_percent: {bad}}}\n"
        ));
        assert!(e.contains("pace io_pressure_percent"), "{bad}: {e}");
        assert!(e.contains("above 0 and under 100"), "{bad}: {e}");
        let e = err(&format!(
            "safety:\n  pace: {{added_io_pressure_percent: {bad}}}\n"
        ));
        assert!(e.contains("pace added_io_pressure_percent"), "{bad}: {e}");
        assert!(e.contains("above 0 and under 100 (e.g. 0.1)"), "{bad}: {e}");
    }
    assert!(err("safety: {pace: {threshold: 5}}").contains("unknown field `threshold`"));
    assert!(err("safety: {pace: {max_delay: soon}}").contains("soon is not a duration"));
}

#[test]
fn a_policy_written_for_the_absolute_threshold_sets_the_budgets_ceiling() {
    // The formerly documented `{io_pressure_percent: 10, max_delay: 10m}`:
    // the ceiling, with the budget at its default target; said once by
    // `check` and every run (`ceiling_only`).
    let old = parse("safety: {pace: {io_pressure_percent: 2.5, max_delay: 90s}}")
        .unwrap()
        .safety
        .pace
        .unwrap();
    assert!((old.io_pressure_percent - 2.5).abs() < f64::EPSILON);
    assert!((old.added_io_pressure_percent - 0.1).abs() < f64::EPSILON);
    assert_eq!(old.max_delay.to_string(), "1m30s");
    assert!(old.ceiling_only);
    // With the target written, or without the ceiling, nothing to say.
    for yaml in [
        "safety: {pace: {io_pressure_percent: 2.5, added_io_pressure_percent: 0.1}}",
        "safety: {pace: {added_io_pressure_percent: 0.3}}",
        "safety: {pace: {max_delay: 1m}}",
    ] {
        assert!(
            !parse(yaml).unwrap().safety.pace.unwrap().ceiling_only,
            "{yaml}"
        );
    }
}

#[test]
fn workloads_cgroup_is_auto_node_or_an_absolute_path() {
    let of = |yaml: &str| {
        parse(&format!("safety: {{pace: {{workloads_cgroup: {yaml}}}}}"))
            .map(|p| p.safety.pace.unwrap().workloads_cgroup)
    };
    assert_eq!(of("auto").unwrap(), WorkloadsCgroup::Auto);
    assert_eq!(of("node").unwrap(), WorkloadsCgroup::Node);
    assert_eq!(
        of("/sys/fs/cgroup/pods.slice").unwrap(),
        WorkloadsCgroup::Path("/sys/fs/cgroup/pods.slice".into())
    );
    for bad in ["kubepods.slice", "Auto", "\"~/pods\"", "5"] {
        assert!(of(bad).is_err(), "{bad}");
    }
    let e = err("safety: {pace: {workloads_cgroup: Node}}");
    assert!(
        e.contains("path 'Node' is not absolute: write the full path, starting with '/', or write auto or node"),
        "{e}"
    );
}

#[test]
fn check_prints_every_pace_key_and_reads_it_back_the_same() {
    let set = parse(
        "safety:\n  pace:\n    added_io_pressure_percent: 0.5\n    \
         workloads_cgroup: /sys/fs/cgroup/pods.slice\n    on_max_delay: stop\n",
    )
    .unwrap()
    .safety
    .pace
    .unwrap();
    assert!((set.added_io_pressure_percent - 0.5).abs() < f64::EPSILON);
    assert_eq!(
        set.workloads_cgroup,
        WorkloadsCgroup::Path("/sys/fs/cgroup/pods.slice".into())
    );
    assert_eq!(set.on_max_delay, OnMaxDelay::Stop);
    let yaml = Policy {
        safety: crate::policy::Safety {
            pace: Some(set.clone()),
            ..Default::default()
        },
        ..Policy::builtin()
    }
    .to_yaml();
    assert!(
        yaml.contains("added_io_pressure_percent: 0.5")
            && yaml.contains("io_pressure_percent: 10")
            && yaml.contains("max_delay: 10m")
            && yaml.contains("workloads_cgroup: /sys/fs/cgroup/pods.slice")
            && yaml.contains("on_max_delay: stop")
            && !yaml.contains("ceiling_only"),
        "{yaml}"
    );
    assert_eq!(parse(&yaml).unwrap().safety.pace, Some(set));
    let builtin = Policy::builtin().to_yaml();
    assert!(builtin.contains("workloads_cgroup: auto"), "{builtin}");
    assert_eq!(parse(&builtin).unwrap().safety.pace, Some(Pace::default()));
    // A policy written for the threshold prints the target it now has, and
    // what it prints no longer says it was one.
    let old = parse("safety: {pace: {io_pressure_percent: 5}}")
        .unwrap()
        .to_yaml();
    assert!(old.contains("added_io_pressure_percent: 0.1"), "{old}");
    assert!(!parse(&old).unwrap().safety.pace.unwrap().ceiling_only);
}
