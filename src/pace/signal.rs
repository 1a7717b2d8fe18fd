//! Whose stall the pacer reads (`safety.pace.workloads_cgroup`), found once
//! for `run`, `check` and `plan` alike: the workloads' (kubelet's pods'
//! cgroup, or a cgroup the policy names) or the node's.
//!
//! The node's pressure (`/proc/pressure/io`) also counts the waits of
//! dockerd and containerd on the very removals being paced, and whatever
//! the node stalls on by itself: a budget over it holds the removals to
//! what the workloads may never feel, and a run goes slower. The pods'
//! cgroup counts only the waits of tasks in pods, which is what pacing is
//! for; where there is none (a plain Docker host) `auto` does not pace.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use super::psi::PsiSource;
use crate::policy::WorkloadsCgroup;

/// The cgroup v2 mount points under a node's root: the unified hierarchy
/// itself, or on a hybrid host (v1 controllers, v2 beside them) its
/// `unified` directory.
const CGROUP2_MOUNTS: [&str; 2] = ["sys/fs/cgroup", "sys/fs/cgroup/unified"];

/// The cgroup kubelet puts every pod under, at the root of the hierarchy:
/// `kubepods.slice` with the systemd cgroup driver, `kubepods` with the
/// cgroupfs driver.
const PODS_CGROUPS: [&str; 2] = ["kubepods.slice", "kubepods"];

/// The stall a run is paced by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// A cgroup's `io.pressure`: kubelet's pods' cgroup, or the one the
    /// policy names.
    Workloads(PsiSource),
    /// The node's (`workloads_cgroup: node`).
    Node(PsiSource),
}

/// Why there is no signal to pace by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoSignal {
    /// `auto`, and no pods' cgroup could be read: not a Kubernetes node (or
    /// its cgroup file system is not mounted where safeprune runs). The run
    /// is not paced. What was tried, each path with its error.
    NoPodsCgroup(String),
    /// `node`, and the node shows no PSI. The run is not paced. What was
    /// tried.
    NoPsi(String),
    /// A cgroup the policy names cannot be read: the run removes nothing
    /// (a path written in the policy is not silently replaced). The file
    /// and why.
    Unreadable(String),
}

impl NoSignal {
    /// A run goes on unpaced, rather than removing nothing.
    #[must_use]
    pub fn runs_unpaced(&self) -> bool {
        !matches!(self, Self::Unreadable(_))
    }

    /// What a run logs once, after `safety.pace: `.
    #[must_use]
    pub fn for_run(&self) -> String {
        match self {
            Self::NoPodsCgroup(tried) => format!(
                "no pods' cgroup found (tried {tried}): removals are not paced \
                 (workloads_cgroup: auto)"
            ),
            Self::NoPsi(tried) => format!(
                "this node shows no I/O pressure (PSI): removals are not paced (tried {tried})"
            ),
            Self::Unreadable(error) => unreadable(error, "nothing removed"),
        }
    }

    /// `check`'s and `plan`'s line, after `safeprune: `.
    #[must_use]
    pub fn for_check(&self) -> String {
        match self {
            Self::NoPodsCgroup(tried) => format!(
                "safety.pace: no pods' cgroup found (tried {tried}): a run would not be paced \
                 (workloads_cgroup: auto); on a Kubernetes node, name the pods' cgroup in \
                 workloads_cgroup, or write node to pace by the node's pressure"
            ),
            Self::NoPsi(tried) => format!(
                "safety.pace: this node shows no I/O pressure (PSI): removals would not be paced \
                 (tried {tried}); to pace them, turn PSI on (a kernel with CONFIG_PSI, booted \
                 with psi=1), or write safety.pace: null"
            ),
            Self::Unreadable(error) => unreadable(error, "a run would remove nothing"),
        }
    }

    /// The table's words after `paced: no, `.
    #[must_use]
    pub fn for_table(workloads_cgroup: &str) -> &'static str {
        if workloads_cgroup == "node" {
            "the node shows no I/O pressure (PSI)"
        } else {
            "no pods' cgroup found (workloads_cgroup: auto)"
        }
    }
}

/// A `workloads_cgroup` whose `io.pressure` cannot be read (`error`): what
/// comes of it (`outcome`) and what to do.
fn unreadable(error: &str, outcome: &str) -> String {
    format!(
        "safety.pace.workloads_cgroup: cannot read the workloads' I/O pressure ({error}): \
         {outcome}; fix the path, or write auto to use kubelet's pods' cgroup"
    )
}

impl Signal {
    /// Whose stall `workloads_cgroup` names under `root` (`/` on a node):
    /// `auto`, the `io.pressure` of kubelet's pods' cgroup
    /// (`kubepods.slice`, then `kubepods`) under the cgroup v2 mount
    /// (`/sys/fs/cgroup`, then a hybrid host's `/sys/fs/cgroup/unified`);
    /// `node`, the node's as [`PsiSource::find`] finds it; a path, that
    /// cgroup's, taken under `root`.
    ///
    /// # Errors
    /// When there is none: why, and what was tried (see [`NoSignal`]).
    pub fn find(root: &Path, workloads_cgroup: &WorkloadsCgroup) -> Result<Self, NoSignal> {
        match workloads_cgroup {
            WorkloadsCgroup::Path(dir) => {
                let Ok(relative) = dir.strip_prefix("/") else {
                    return Err(NoSignal::Unreadable(format!(
                        "{}: not an absolute path",
                        dir.display()
                    )));
                };
                let source = PsiSource::at(root.join(relative).join("io.pressure"));
                match source.stalled() {
                    Ok(_) => Ok(Self::Workloads(source)),
                    Err(e) => Err(NoSignal::Unreadable(format!(
                        "{}: {e}",
                        source.path().display()
                    ))),
                }
            }
            WorkloadsCgroup::Node => PsiSource::find(root)
                .map(Self::Node)
                .map_err(NoSignal::NoPsi),
            WorkloadsCgroup::Auto => {
                let mut tried = Vec::new();
                for mount in CGROUP2_MOUNTS {
                    for pods in PODS_CGROUPS {
                        let source = PsiSource::at(root.join(mount).join(pods).join("io.pressure"));
                        match source.stalled() {
                            Ok(_) => return Ok(Self::Workloads(source)),
                            Err(e) => tried.push(format!("{}: {e}", source.path().display())),
                        }
                    }
                }
                Err(NoSignal::NoPodsCgroup(tried.join("; ")))
            }
        }
    }

    /// The `io.pressure` file read.
    #[must_use]
    pub fn source(&self) -> &PsiSource {
        match self {
            Self::Workloads(source) | Self::Node(source) => source,
        }
    }

    /// `workloads` or `node`, as the report says.
    #[must_use]
    pub fn whose(&self) -> &'static str {
        match self {
            Self::Workloads(_) => "workloads",
            Self::Node(_) => "node",
        }
    }

    /// The workloads' `cpu.pressure`, beside their `io.pressure`, when it
    /// can be read: the stall budget counts their waits for a CPU too.
    /// `None` for the node's (its CPU pressure counts the engines' own
    /// work on the removals, as its I/O pressure does).
    ///
    /// Measured (BENCHMARKS.md): two busy loops outside a probe's cgroup on
    /// two cores made 3.7% of its operations slower than its idle p99
    /// (9.9% in a first run), and its `io.pressure` did not move (0.42 s
    /// against 0.58 s idle, in 15 s); its `cpu.pressure` tripled (0.46 s
    /// against 0.16 s). The engines'
    /// work on removals is such a load, and a budget over the I/O stall
    /// alone let paced runs slow 2.4% of the probe's operations while it
    /// held its own target.
    #[must_use]
    pub fn cpu(&self) -> Option<PsiSource> {
        let Self::Workloads(io) = self else {
            return None;
        };
        let source = PsiSource::at(io.path().with_file_name("cpu.pressure"));
        source.stalled().is_ok().then_some(source)
    }
}

impl fmt::Display for Signal {
    /// `the workloads' I/O and CPU stall (PSI some, …/io.pressure and
    /// cpu.pressure)`, as `check` and `plan` say it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = match self {
            Self::Workloads(_) => "the workloads'",
            Self::Node(_) => "the node's",
        };
        let (stall, cpu) = if self.cpu().is_some() {
            ("I/O and CPU stall", " and cpu.pressure")
        } else {
            ("I/O stall", "")
        };
        write!(
            f,
            "{whose} {stall} (PSI some, {}{cpu})",
            self.source().path().display()
        )
    }
}

/// The stall the budget reads: a signal's `io.pressure`, plus the
/// workloads' `cpu.pressure` where [`Signal::cpu`] finds it, summed.
#[derive(Debug, Clone)]
pub struct Stall {
    io: PsiSource,
    /// With its last `some total` read: a reading that fails counts no
    /// growth, so that the sum never goes back or leaps.
    cpu: Option<(PsiSource, Duration)>,
}

impl Stall {
    /// What `signal` reads.
    #[must_use]
    pub fn of(signal: &Signal) -> Self {
        let cpu = signal.cpu().map(|source| {
            let total = source.stalled().unwrap_or_default();
            (source, total)
        });
        Self {
            io: signal.source().clone(),
            cpu,
        }
    }

    /// The `io.pressure` read.
    #[must_use]
    pub fn io(&self) -> &PsiSource {
        &self.io
    }

    /// The `cpu.pressure` read beside it, if any.
    #[must_use]
    pub fn cpu(&self) -> Option<&PsiSource> {
        self.cpu.as_ref().map(|(source, _)| source)
    }

    /// The I/O `some total` now, and the I/O and CPU ones summed.
    ///
    /// # Errors
    /// When the I/O's cannot be read.
    pub fn read(&mut self) -> Result<(Duration, Duration), String> {
        let io = self.io.stalled()?;
        let cpu = self.cpu.as_mut().map_or(Duration::ZERO, |(source, last)| {
            if let Ok(total) = source.stalled() {
                *last = total;
            }
            *last
        });
        Ok((io, io + cpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::psi::tests::{PSI, write};
    use std::path::PathBuf;

    fn path(dir: &str) -> WorkloadsCgroup {
        WorkloadsCgroup::Path(PathBuf::from(dir))
    }

    /// The workloads' signal found under `root`.
    fn workloads(root: &Path, configured: &WorkloadsCgroup) -> PathBuf {
        match Signal::find(root, configured).unwrap() {
            Signal::Workloads(source) => source.path().to_owned(),
            node @ Signal::Node(_) => panic!("not the workloads': {node:?}"),
        }
    }

    #[test]
    fn auto_finds_the_pods_cgroup_of_either_kubelet_driver_on_v2_or_hybrid() {
        for mount in CGROUP2_MOUNTS {
            for pods in PODS_CGROUPS {
                let root = tempfile::tempdir().unwrap();
                // The node's pressure is there too: the pods' comes first.
                write(root.path(), "proc/pressure/io", PSI);
                let file = format!("{mount}/{pods}/io.pressure");
                write(root.path(), &file, PSI);
                assert_eq!(
                    workloads(root.path(), &WorkloadsCgroup::Auto),
                    root.path().join(&file),
                    "{file}"
                );
            }
        }
        // With both drivers' cgroups (a node that changed driver), the
        // systemd driver's: kubelet's default on systemd hosts.
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "sys/fs/cgroup/kubepods/io.pressure", PSI);
        write(root.path(), "sys/fs/cgroup/kubepods.slice/io.pressure", PSI);
        assert_eq!(
            workloads(root.path(), &WorkloadsCgroup::Auto),
            root.path().join("sys/fs/cgroup/kubepods.slice/io.pressure")
        );
    }

    #[test]
    fn auto_without_a_pods_cgroup_does_not_fall_back_on_the_nodes_pressure() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "proc/pressure/io", PSI);
        // Present but unreadable as PSI counts as absent too.
        write(
            root.path(),
            "sys/fs/cgroup/kubepods.slice/io.pressure",
            "junk\n",
        );
        let e = Signal::find(root.path(), &WorkloadsCgroup::Auto).unwrap_err();
        let NoSignal::NoPodsCgroup(tried) = &e else {
            panic!("{e:?}");
        };
        for tried_path in [
            "sys/fs/cgroup/kubepods.slice/io.pressure: no `some",
            "sys/fs/cgroup/kubepods/io.pressure: No such file",
            "sys/fs/cgroup/unified/kubepods.slice/io.pressure",
            "sys/fs/cgroup/unified/kubepods/io.pressure",
        ] {
            assert!(tried.contains(tried_path), "{tried_path} in {tried}");
        }
        assert!(e.runs_unpaced());
        assert!(
            e.for_run().starts_with("no pods' cgroup found (tried ")
                && e.for_run()
                    .ends_with("): removals are not paced (workloads_cgroup: auto)"),
            "{}",
            e.for_run()
        );
        assert!(
            e.for_check()
                .contains("a run would not be paced (workloads_cgroup: auto)"),
            "{}",
            e.for_check()
        );
    }

    #[test]
    fn node_reads_the_nodes_pressure_and_no_cpu_stall() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "proc/pressure/io", PSI);
        write(root.path(), "sys/fs/cgroup/kubepods.slice/io.pressure", PSI);
        let signal = Signal::find(root.path(), &WorkloadsCgroup::Node).unwrap();
        assert_eq!(
            signal,
            Signal::Node(PsiSource::at(root.path().join("proc/pressure/io")))
        );
        assert_eq!(signal.whose(), "node");
        assert_eq!(signal.cpu(), None);
        assert!(
            signal
                .to_string()
                .starts_with("the node's I/O stall (PSI some, ")
        );
        // Without PSI: not paced, and `check` says how to pace.
        let bare = tempfile::tempdir().unwrap();
        let e = Signal::find(bare.path(), &WorkloadsCgroup::Node).unwrap_err();
        assert!(matches!(&e, NoSignal::NoPsi(tried) if tried.contains("proc/pressure/io")));
        assert!(e.runs_unpaced());
        assert!(e.for_check().contains("turn PSI on"), "{}", e.for_check());
    }

    #[test]
    fn a_named_cgroup_comes_first_with_its_cpu_stall() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "sys/fs/cgroup/kubepods.slice/io.pressure", PSI);
        write(root.path(), "sys/fs/cgroup/pods.slice/io.pressure", PSI);
        let named = path("/sys/fs/cgroup/pods.slice");
        assert_eq!(
            workloads(root.path(), &named),
            root.path().join("sys/fs/cgroup/pods.slice/io.pressure")
        );
        let signal = Signal::find(root.path(), &named).unwrap();
        assert_eq!(signal.cpu(), None);
        assert!(
            signal
                .to_string()
                .starts_with("the workloads' I/O stall (PSI some, ")
        );
        write(root.path(), "sys/fs/cgroup/pods.slice/cpu.pressure", PSI);
        assert!(signal.cpu().is_some());
        assert!(
            signal
                .to_string()
                .starts_with("the workloads' I/O and CPU stall (PSI some, ")
                && signal
                    .to_string()
                    .ends_with("io.pressure and cpu.pressure)"),
            "{signal}"
        );
    }

    #[test]
    fn a_named_cgroup_that_cannot_be_read_is_an_error_not_a_fallback() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "proc/pressure/io", PSI);
        write(root.path(), "sys/fs/cgroup/kubepods.slice/io.pressure", PSI);
        let e = Signal::find(root.path(), &path("/sys/fs/cgroup/typo.slice")).unwrap_err();
        assert!(!e.runs_unpaced());
        let NoSignal::Unreadable(why) = &e else {
            panic!("{e:?}");
        };
        assert!(
            why.contains("sys/fs/cgroup/typo.slice/io.pressure: No such file"),
            "{why}"
        );
        assert!(
            e.for_run().starts_with(
                "safety.pace.workloads_cgroup: cannot read the workloads' I/O pressure ("
            ) && e.for_run().ends_with(
                "): nothing removed; fix the path, or write auto to use kubelet's pods' cgroup"
            ),
            "{}",
            e.for_run()
        );
        write(
            root.path(),
            "sys/fs/cgroup/junk.slice/io.pressure",
            "junk\n",
        );
        let e = Signal::find(root.path(), &path("/sys/fs/cgroup/junk.slice")).unwrap_err();
        assert!(
            matches!(&e, NoSignal::Unreadable(why) if why.contains("junk.slice/io.pressure: no `some")),
            "{e:?}"
        );
        let e = Signal::find(root.path(), &path("sys/fs/cgroup/kubepods.slice")).unwrap_err();
        assert!(
            matches!(&e, NoSignal::Unreadable(why) if why.contains("not an absolute path")),
            "{e:?}"
        );
    }
}
