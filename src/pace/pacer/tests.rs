//! The pacer over real pressure files in a temporary directory: which
//! signal it finds, what it reads, and what it reports.

use super::*;
use crate::policy::WorkloadsCgroup;

const PSI: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

/// A node root with these PSI files (paths under it).
fn node_with(files: &[&str]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for file in files {
        let path = root.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, PSI).unwrap();
    }
    root
}

/// The built-in policy (paced, `auto`) with `workloads_cgroup`.
fn policy(workloads_cgroup: WorkloadsCgroup) -> Policy {
    let mut p = Policy::builtin();
    p.safety.pace.as_mut().unwrap().workloads_cgroup = workloads_cgroup;
    p
}

#[test]
fn auto_paces_by_the_pods_cgroup_where_found() {
    let root = node_with(&[
        "proc/pressure/io",
        "sys/fs/cgroup/kubepods.slice/io.pressure",
        "sys/fs/cgroup/kubepods.slice/cpu.pressure",
    ]);
    let pacer = Pacer::for_policy_under(&policy(WorkloadsCgroup::Auto), root.path()).unwrap();
    assert!(pacer.reads_pressure());
    let report = pacer.report().unwrap();
    let file = root.path().join("sys/fs/cgroup/kubepods.slice/io.pressure");
    assert_eq!(report.source.as_deref(), file.to_str());
    assert_eq!(report.workloads_cgroup, "auto");
    assert_eq!(report.budget.signal, Some("workloads"));
    assert!(report.budget.cpu_source.is_some());
    assert!((report.budget.added_io_pressure_percent - 0.1).abs() < f64::EPSILON);
    // Nothing removed yet: no baseline.
    assert_eq!(report.to_string(), "no removal batch to pace");
}

#[test]
fn auto_without_a_pods_cgroup_runs_unpaced_and_the_report_says_so() {
    // The node shows PSI: `auto` still does not pace by it.
    let root = node_with(&["proc/pressure/io"]);
    let pacer = Pacer::for_policy_under(&policy(WorkloadsCgroup::Auto), root.path()).unwrap();
    assert!(!pacer.reads_pressure());
    // `auto`'s concurrency climbs as unpaced.
    assert_eq!(pacer.limit(), adapt::START);
    let report = pacer.report().unwrap();
    assert_eq!(report.source, None);
    assert_eq!(report.budget.signal, None);
    assert_eq!(report.budget.baseline_io_pressure_percent, None);
    assert!(report.paced_seconds.abs() < f64::EPSILON);
    assert_eq!(
        report.to_string(),
        "no, no pods' cgroup found (workloads_cgroup: auto)"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["source"], serde_json::Value::Null);
    assert_eq!(json["signal"], serde_json::Value::Null);
    assert_eq!(json["workloads_cgroup"], "auto");
}

#[test]
fn node_paces_by_the_nodes_pressure_and_without_psi_runs_unpaced() {
    let root = node_with(&[
        "proc/pressure/io",
        "sys/fs/cgroup/kubepods.slice/io.pressure",
    ]);
    let pacer = Pacer::for_policy_under(&policy(WorkloadsCgroup::Node), root.path()).unwrap();
    let report = pacer.report().unwrap();
    assert_eq!(report.budget.signal, Some("node"));
    assert_eq!(report.budget.cpu_source, None);
    assert_eq!(
        report.source.as_deref(),
        root.path().join("proc/pressure/io").to_str()
    );
    let bare = tempfile::tempdir().unwrap();
    let pacer = Pacer::for_policy_under(&policy(WorkloadsCgroup::Node), bare.path()).unwrap();
    assert!(!pacer.reads_pressure());
    assert_eq!(
        pacer.report().unwrap().to_string(),
        "no, the node shows no I/O pressure (PSI)"
    );
}

#[test]
fn a_named_cgroup_that_cannot_be_read_removes_nothing() {
    let root = node_with(&[
        "proc/pressure/io",
        "sys/fs/cgroup/kubepods.slice/io.pressure",
    ]);
    let named = WorkloadsCgroup::Path("/sys/fs/cgroup/typo.slice".into());
    let Err(e) = Pacer::for_policy_under(&policy(named), root.path()) else {
        panic!("a pacer over a cgroup that is not there");
    };
    assert!(
        e.starts_with("safety.pace.workloads_cgroup: cannot read the workloads' I/O pressure (")
            && e.contains("typo.slice/io.pressure: No such file"),
        "{e}"
    );
    let named = WorkloadsCgroup::Path("/sys/fs/cgroup/kubepods.slice".into());
    let pacer = Pacer::for_policy_under(&policy(named), root.path()).unwrap();
    assert_eq!(pacer.report().unwrap().budget.signal, Some("workloads"));
}

#[test]
fn off_it_never_reads_and_reports_nothing() {
    let root = node_with(&["sys/fs/cgroup/kubepods.slice/io.pressure"]);
    let mut p = policy(WorkloadsCgroup::Auto);
    p.safety.pace = None;
    p.safety.concurrency = Concurrency::Fixed(3);
    let mut pacer = Pacer::for_policy_under(&p, root.path()).unwrap();
    assert!(!pacer.reads_pressure());
    assert_eq!(pacer.limit(), 3);
    assert_eq!(pacer.gate(), Gate::Go(3));
    assert_eq!(pacer.report(), None);
    // `run --no-pace` is the same pacer.
    let mut unpaced = Pacer::unpaced(Concurrency::Fixed(3));
    assert_eq!(unpaced.gate(), Gate::Go(3));
    assert_eq!(unpaced.report(), None);
}

#[test]
fn paced_auto_concurrency_is_the_budgets_ceiling_not_a_climb() {
    let root = node_with(&["sys/fs/cgroup/kubepods.slice/io.pressure"]);
    let pacer = Pacer::for_policy_under(&policy(WorkloadsCgroup::Auto), root.path()).unwrap();
    assert_eq!(pacer.most(), adapt::CEILING);
    // Before the baseline the budget holds nothing yet; once measured it
    // starts at one (see `Budget::gate`).
    assert!(pacer.climb.is_none());
}

#[test]
fn a_policy_written_for_the_threshold_is_said_to_set_the_ceiling() {
    let mut p = policy(WorkloadsCgroup::Auto);
    let pace = p.safety.pace.as_mut().unwrap();
    pace.io_pressure_percent = 5.0;
    pace.ceiling_only = true;
    assert_eq!(
        ceiling_only_note(pace).unwrap(),
        "io_pressure_percent 5 is now the stall budget's ceiling; the removals may add \
         added_io_pressure_percent 0.1 (the default) to the workloads' own stall: write \
         added_io_pressure_percent to choose it"
    );
    pace.ceiling_only = false;
    assert_eq!(ceiling_only_note(pace), None);
}
