//! The node's I/O pressure, as `safety.pace` reads it: PSI's `some` line
//! (`some avg10=1.53 avg60=0.87 avg300=0.22 total=58761459`) of
//! `/proc/pressure/io`, or of this process's own cgroup where that is
//! what the node shows a pod.
//!
//! The pacer needs the pressure of the last fraction of a second, not of
//! the last ten: `avg10` moves every 2 s and is a ten-second average, so
//! a run's own removals show in it late and long after (issue 24: a 0.5 s
//! run read 22 times saw 8.6%). [`PsiWindow`] reads `total` (microseconds
//! in which some task waited on I/O, since boot) and gives the share of
//! the time since its last reading that was stalled.
//!
//! Whose pressure: [`Signal`] finds the workloads' (the pods' cgroup,
//! which counts only the waits of tasks in pods), and falls back on the
//! node's, saying why (issue 38).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The shortest window a share is taken over: shorter ones are mostly the
/// noise of one task's wait.
pub const MIN_WINDOW: Duration = Duration::from_millis(100);

/// Where a node's I/O pressure is read: `/proc/pressure/io`, or where the
/// node shows a pod only its own cgroup, that cgroup's `io.pressure`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PsiSource {
    path: PathBuf,
}

impl PsiSource {
    /// The first readable source under `root` (`/` on a node): the
    /// system's, else this process's cgroup v2 (`0::<path>` of
    /// `/proc/self/cgroup`, under `/sys/fs/cgroup` or, on a hybrid
    /// hierarchy, `/sys/fs/cgroup/unified`). `Err` says what was tried.
    ///
    /// # Errors
    /// When no source could be read, each tried path with its error.
    pub fn find(root: &Path) -> Result<Self, String> {
        let mut tried = Vec::new();
        let mut candidates = vec![root.join("proc/pressure/io")];
        match std::fs::read_to_string(root.join("proc/self/cgroup")) {
            Ok(text) => {
                if let Some(own) = text.lines().find_map(|l| l.strip_prefix("0::")) {
                    let own = own.trim_start_matches('/');
                    for base in ["sys/fs/cgroup", "sys/fs/cgroup/unified"] {
                        candidates.push(root.join(base).join(own).join("io.pressure"));
                    }
                }
            }
            Err(e) => tried.push(format!("{}: {e}", root.join("proc/self/cgroup").display())),
        }
        for path in candidates {
            let source = Self { path };
            match source.stalled() {
                Ok(_) => return Ok(source),
                Err(e) => tried.push(format!("{}: {e}", source.path.display())),
            }
        }
        Err(tried.join("; "))
    }

    /// The file read.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `some total` now: how long some task has waited on I/O since boot.
    ///
    /// # Errors
    /// When the file cannot be read or holds no `some` line with a total.
    pub fn stalled(&self) -> Result<Duration, String> {
        Ok(self.read()?.0)
    }

    /// The file's text now.
    fn text(&self) -> Result<String, String> {
        std::fs::read_to_string(&self.path).map_err(|e| e.to_string())
    }

    /// `some`'s three averages now: what the node itself has been doing.
    ///
    /// # Errors
    /// When the file cannot be read or its `some` line lacks one of them.
    pub fn averages(&self) -> Result<Averages, String> {
        let text = self.text()?;
        match (
            some_percent(&text, "avg10"),
            some_percent(&text, "avg60"),
            some_percent(&text, "avg300"),
        ) {
            (Some(avg10), Some(avg60), Some(avg300)) => Ok(Averages {
                avg10,
                avg60,
                avg300,
            }),
            _ => Err("no `some avg10=... avg60=... avg300=` figures in it".to_owned()),
        }
    }

    /// `some total` and `some avg10` now.
    fn read(&self) -> Result<(Duration, f64), String> {
        let text = self.text()?;
        match (some_total(&text), some_avg10(&text)) {
            (Some(total), Some(avg10)) => Ok((total, avg10)),
            _ => Err("no `some avg10=... total=` figures in it".to_owned()),
        }
    }
}

/// The cgroup v2 mount points under a node's root: the unified hierarchy
/// itself, or on a hybrid host (v1 controllers, v2 beside them) its
/// `unified` directory.
const CGROUP2_MOUNTS: [&str; 2] = ["sys/fs/cgroup", "sys/fs/cgroup/unified"];

/// The cgroup kubelet puts every pod under, at the root of the hierarchy:
/// `kubepods.slice` with the systemd cgroup driver, `kubepods` with the
/// cgroupfs driver.
const PODS_CGROUPS: [&str; 2] = ["kubepods.slice", "kubepods"];

/// Whose I/O stall the pacer reads: the workloads' (the pods' cgroup), or
/// where there is none, the node's.
///
/// The node's pressure (`/proc/pressure/io`) also counts the waits of
/// dockerd and containerd on the very deletions being paced, and whatever
/// the node stalls on by itself: a limit on it limits the removals by
/// what the workloads may never feel (issue 38). The pods' cgroup counts
/// only the waits of tasks in pods, which is what pacing is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// The pods' cgroup's `io.pressure`: configured, or kubelet's found.
    Workloads(PsiSource),
    /// No pods' cgroup found: the node's pressure, and what was tried
    /// for the pods' (each path with its error).
    Node(PsiSource, String),
}

impl Signal {
    /// Whose stall to read under `root` (`/` on a node): the `io.pressure`
    /// of `configured` (an absolute cgroup directory, taken under `root`)
    /// when given; else of kubelet's pods' cgroup (`kubepods.slice`, then
    /// `kubepods`) under the cgroup v2 mount (`/sys/fs/cgroup`, then a
    /// hybrid host's `/sys/fs/cgroup/unified`); else the node's, as
    /// [`PsiSource::find`] finds it.
    ///
    /// # Errors
    /// When `configured` is given and its `io.pressure` cannot be read (a
    /// path written in the policy that does not work is not silently
    /// replaced by another signal), or when nothing could be read: each
    /// tried path with its error.
    pub fn find(root: &Path, configured: Option<&Path>) -> Result<Self, String> {
        if let Some(dir) = configured {
            let Ok(relative) = dir.strip_prefix("/") else {
                return Err(format!("{}: not an absolute path", dir.display()));
            };
            let source = PsiSource {
                path: root.join(relative).join("io.pressure"),
            };
            return match source.stalled() {
                Ok(_) => Ok(Self::Workloads(source)),
                Err(e) => Err(format!("{}: {e}", source.path.display())),
            };
        }
        let mut tried = Vec::new();
        for mount in CGROUP2_MOUNTS {
            for pods in PODS_CGROUPS {
                let source = PsiSource {
                    path: root.join(mount).join(pods).join("io.pressure"),
                };
                match source.stalled() {
                    Ok(_) => return Ok(Self::Workloads(source)),
                    Err(e) => tried.push(format!("{}: {e}", source.path.display())),
                }
            }
        }
        let tried = tried.join("; ");
        match PsiSource::find(root) {
            Ok(node) => Ok(Self::Node(node, tried)),
            Err(node_tried) => Err(format!("{tried}; {node_tried}")),
        }
    }

    /// The file read.
    #[must_use]
    pub fn source(&self) -> &PsiSource {
        match self {
            Self::Workloads(source) | Self::Node(source, _) => source,
        }
    }

    /// The workloads' `cpu.pressure`, beside their `io.pressure`, when it
    /// can be read: the stall budget counts their waits for a CPU too.
    /// `None` for the node's (its CPU pressure counts the engines' own
    /// work on the removals, as its I/O pressure does).
    ///
    /// Measured (BENCHMARKS.md, issue 38): two busy loops outside a probe's
    /// cgroup on two cores made 9.9% of its operations slower than its
    /// idle p99, and its `io.pressure` did not move (0.39 s against 0.57 s
    /// idle, in 15 s); its `cpu.pressure` did (0.42 s against 0.15 s). The
    /// engines' work on removals is such a load, and a budget over the I/O
    /// stall alone let paced runs slow 2.4% of the probe's operations while
    /// it held its own target.
    #[must_use]
    pub fn cpu(&self) -> Option<PsiSource> {
        let Self::Workloads(io) = self else {
            return None;
        };
        let source = PsiSource {
            path: io.path().with_file_name("cpu.pressure"),
        };
        source.stalled().is_ok().then_some(source)
    }

    /// What a run says once when it paces by the node's pressure: why
    /// not the workloads'. `None` for the workloads'.
    #[must_use]
    pub fn fallback_note(&self) -> Option<String> {
        match self {
            Self::Workloads(_) => None,
            Self::Node(source, tried) => Some(format!(
                "no pods' cgroup found (tried {tried}): pacing by the node's pressure ({})",
                source.path().display()
            )),
        }
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

/// The fields of the `some` line of a PSI file.
fn some_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_ascii_whitespace()
        .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
}

/// PSI's averages of the share of the time some task waited on I/O,
/// percent, over the last 10 s, 60 s and 300 s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Averages {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

/// The `avg10` of the `some` line of a PSI file, percent.
#[must_use]
pub fn some_avg10(text: &str) -> Option<f64> {
    some_percent(text, "avg10")
}

/// An average (`avg10`, `avg60`, `avg300`) of the `some` line, percent.
fn some_percent(text: &str, name: &str) -> Option<f64> {
    some_field(text, name)?
        .parse::<f64>()
        .ok()
        .filter(|p| p.is_finite() && (0.0..=100.0).contains(p))
}

/// The `total` of the `some` line of a PSI file (microseconds).
#[must_use]
pub fn some_total(text: &str) -> Option<Duration> {
    some_field(text, "total")?
        .parse::<u64>()
        .ok()
        .map(Duration::from_micros)
}

/// The share of `elapsed` that `stalled` covers, percent (0 to 100).
#[must_use]
pub fn share(stalled: Duration, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        return 0.0;
    }
    (stalled.as_secs_f64() / elapsed.as_secs_f64() * 100.0).clamp(0.0, 100.0)
}

/// What a reading of the pressure gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// The share of the window since the last reading that was stalled,
    /// percent, and how long that window was.
    Share(f64, Duration),
    /// Less than [`MIN_WINDOW`] since the last reading: nothing new for
    /// this long yet.
    TooSoon(Duration),
    /// The file could not be read.
    Unreadable,
}

/// How long `avg10` averages over.
const AVG10: Duration = Duration::from_secs(10);

/// Shares of stalled time over successive windows of one source.
pub struct PsiWindow {
    source: PsiSource,
    last: Option<(Duration, Instant)>,
    warned: bool,
}

impl PsiWindow {
    /// A window over `source`; its first reading is `avg10`, the last ten
    /// seconds', so that a first batch is paced by what the node was
    /// doing, not let through for want of a window.
    #[must_use]
    pub fn new(source: PsiSource) -> Self {
        Self {
            source,
            last: None,
            warned: false,
        }
    }

    /// The share since the last reading (the first: `avg10`), and a new
    /// window begun; warns once when the file cannot be read.
    pub fn read(&mut self) -> Reading {
        let now = Instant::now();
        if let Some((_, at)) = self.last
            && now.duration_since(at) < MIN_WINDOW
        {
            return Reading::TooSoon(MIN_WINDOW.saturating_sub(now.duration_since(at)));
        }
        let (total, avg10) = match self.source.read() {
            Ok(read) => read,
            Err(e) => {
                if !self.warned {
                    tracing::warn!(path = %self.source.path().display(), error = %e, "safety.pace: cannot read the I/O pressure: not pacing while it stays unreadable");
                    self.warned = true;
                }
                self.last = None;
                return Reading::Unreadable;
            }
        };
        let reading = match self.last {
            Some((before, at)) => {
                let window = now.duration_since(at);
                Reading::Share(share(total.saturating_sub(before), window), window)
            }
            None => Reading::Share(avg10, AVG10),
        };
        self.last = Some((total, now));
        reading
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_some_lines_figures() {
        let text = "some avg10=12.34 avg60=0.87 avg300=0.22 total=58761459\n\
                    full avg10=99.00 avg60=0.50 avg300=0.10 total=1000\n";
        assert_eq!(some_avg10(text), Some(12.34));
        assert_eq!(some_total(text), Some(Duration::from_micros(58_761_459)));
        let full_only = "full avg10=1.00 avg60=0 avg300=0 total=0\n";
        assert_eq!(some_avg10(full_only), None);
        assert_eq!(some_total(full_only), None);
        assert_eq!(some_avg10("some avg10=junk\n"), None);
        assert_eq!(some_avg10("some avg10=250.00\n"), None);
        assert_eq!(some_total("some avg10=1.00 total=-4\n"), None);
        assert_eq!(some_avg10(""), None);
        assert_eq!(some_percent(text, "avg60"), Some(0.87));
        assert_eq!(some_percent(text, "avg300"), Some(0.22));
        assert_eq!(some_percent("some avg10=1 avg300=x\n", "avg300"), None);
    }

    #[test]
    fn a_share_is_of_the_window() {
        let ms = Duration::from_millis;
        assert!((share(ms(25), ms(100)) - 25.0).abs() < 1e-9);
        assert!((share(ms(0), ms(100))).abs() < 1e-9);
        // Stalls are counted per CPU's task: never more than all of it.
        assert!((share(ms(300), ms(100)) - 100.0).abs() < 1e-9);
        assert!(share(ms(5), Duration::ZERO).abs() < 1e-9);
    }

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    const PSI: &str =
        "some avg10=3.00 avg60=0 avg300=0 total=1\nfull avg10=1.00 avg60=0 avg300=0 total=1\n";

    #[test]
    fn the_systems_pressure_comes_first() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "proc/pressure/io", PSI);
        write(root.path(), "proc/self/cgroup", "0::/kubepods/pod1/c1\n");
        write(
            root.path(),
            "sys/fs/cgroup/kubepods/pod1/c1/io.pressure",
            PSI,
        );
        let source = PsiSource::find(root.path()).unwrap();
        assert_eq!(source.path(), root.path().join("proc/pressure/io"));
        assert_eq!(source.stalled(), Ok(Duration::from_micros(1)));
    }

    #[test]
    fn without_it_the_own_cgroups_pressure_on_v2_or_hybrid() {
        for base in ["sys/fs/cgroup", "sys/fs/cgroup/unified"] {
            let root = tempfile::tempdir().unwrap();
            write(
                root.path(),
                "proc/self/cgroup",
                "4:memory:/x\n0::/kubepods/pod1/c1\n",
            );
            write(
                root.path(),
                &format!("{base}/kubepods/pod1/c1/io.pressure"),
                PSI,
            );
            let source = PsiSource::find(root.path()).unwrap();
            assert_eq!(
                source.path(),
                root.path().join(base).join("kubepods/pod1/c1/io.pressure")
            );
        }
    }

    #[test]
    fn with_neither_it_says_what_it_tried() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "proc/self/cgroup", "0::/\n");
        // PSI compiled in but off (`psi=0`) reads as an error; junk too.
        write(root.path(), "sys/fs/cgroup/io.pressure", "junk\n");
        let tried = PsiSource::find(root.path()).unwrap_err();
        assert!(tried.contains("proc/pressure/io: No such file"), "{tried}");
        assert!(
            tried.contains("sys/fs/cgroup/io.pressure: no `some avg10=... total=`"),
            "{tried}"
        );
    }

    /// The workloads' signal found under `root`, or what it fell back on.
    fn workloads(root: &Path, configured: Option<&Path>) -> PathBuf {
        match Signal::find(root, configured).unwrap() {
            Signal::Workloads(source) => source.path().to_owned(),
            node @ Signal::Node(..) => panic!("not the workloads': {node:?}"),
        }
    }

    #[test]
    fn the_pods_cgroup_of_either_kubelet_driver_on_v2_or_hybrid() {
        for mount in CGROUP2_MOUNTS {
            for pods in PODS_CGROUPS {
                let root = tempfile::tempdir().unwrap();
                // The node's pressure is there too: the pods' comes first.
                write(root.path(), "proc/pressure/io", PSI);
                let file = format!("{mount}/{pods}/io.pressure");
                write(root.path(), &file, PSI);
                assert_eq!(
                    workloads(root.path(), None),
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
            workloads(root.path(), None),
            root.path().join("sys/fs/cgroup/kubepods.slice/io.pressure")
        );
    }

    #[test]
    fn a_configured_cgroup_comes_first() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "sys/fs/cgroup/kubepods.slice/io.pressure", PSI);
        write(root.path(), "sys/fs/cgroup/pods.slice/io.pressure", PSI);
        assert_eq!(
            workloads(root.path(), Some(Path::new("/sys/fs/cgroup/pods.slice"))),
            root.path().join("sys/fs/cgroup/pods.slice/io.pressure")
        );
    }

    #[test]
    fn a_configured_cgroup_that_cannot_be_read_is_an_error_not_a_fallback() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "proc/pressure/io", PSI);
        write(root.path(), "sys/fs/cgroup/kubepods.slice/io.pressure", PSI);
        let e =
            Signal::find(root.path(), Some(Path::new("/sys/fs/cgroup/typo.slice"))).unwrap_err();
        assert!(
            e.contains("sys/fs/cgroup/typo.slice/io.pressure: No such file"),
            "{e}"
        );
        write(
            root.path(),
            "sys/fs/cgroup/junk.slice/io.pressure",
            "junk\n",
        );
        let e =
            Signal::find(root.path(), Some(Path::new("/sys/fs/cgroup/junk.slice"))).unwrap_err();
        assert!(e.contains("junk.slice/io.pressure: no `some"), "{e}");
        let e =
            Signal::find(root.path(), Some(Path::new("sys/fs/cgroup/kubepods.slice"))).unwrap_err();
        assert!(e.contains("not an absolute path"), "{e}");
    }

    #[test]
    fn without_a_pods_cgroup_the_nodes_pressure_and_what_was_tried() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "proc/pressure/io", PSI);
        let signal = Signal::find(root.path(), None).unwrap();
        let Signal::Node(source, tried) = &signal else {
            panic!("not the node's: {signal:?}");
        };
        assert_eq!(source.path(), root.path().join("proc/pressure/io"));
        assert_eq!(signal.source(), source);
        for tried_path in [
            "sys/fs/cgroup/kubepods.slice/io.pressure",
            "sys/fs/cgroup/kubepods/io.pressure",
            "sys/fs/cgroup/unified/kubepods.slice/io.pressure",
            "sys/fs/cgroup/unified/kubepods/io.pressure",
        ] {
            assert!(tried.contains(tried_path), "{tried_path} in {tried}");
        }
        let note = signal.fallback_note().unwrap();
        assert!(
            note.starts_with("no pods' cgroup found (tried ")
                && note.contains("kubepods.slice/io.pressure: No such file")
                && note.ends_with(&format!(
                    "): pacing by the node's pressure ({})",
                    root.path().join("proc/pressure/io").display()
                )),
            "{note}"
        );
        assert_eq!(Signal::Workloads(source.clone()).fallback_note(), None);
        // Nothing at all: every path tried, the node's too.
        let bare = tempfile::tempdir().unwrap();
        let e = Signal::find(bare.path(), None).unwrap_err();
        assert!(
            e.contains("unified/kubepods/io.pressure") && e.contains("proc/pressure/io"),
            "{e}"
        );
    }

    #[test]
    fn a_window_reads_the_stall_since_the_last_reading() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            "proc/pressure/io",
            "some avg10=7.50 total=1000000\n",
        );
        let mut window = PsiWindow::new(PsiSource::find(root.path()).unwrap());
        assert_eq!(window.read(), Reading::Share(7.5, AVG10), "first, avg10");
        assert!(
            matches!(window.read(), Reading::TooSoon(left) if left <= MIN_WINDOW),
            "under MIN_WINDOW"
        );
        std::thread::sleep(MIN_WINDOW + Duration::from_millis(20));
        // 60 ms stalled in a window of at least 120 ms: at most half.
        write(
            root.path(),
            "proc/pressure/io",
            "some avg10=0 total=1060000\n",
        );
        let Reading::Share(share, window_len) = window.read() else {
            panic!("a share after MIN_WINDOW");
        };
        assert!(window_len >= MIN_WINDOW, "{window_len:?}");
        let expected = 6.0 / window_len.as_secs_f64();
        assert!((share - expected).abs() < 1e-6, "{share} {expected}");
        std::fs::remove_file(root.path().join("proc/pressure/io")).unwrap();
        std::thread::sleep(MIN_WINDOW);
        assert_eq!(window.read(), Reading::Unreadable);
        // Readable again: a new first reading.
        write(
            root.path(),
            "proc/pressure/io",
            "some avg10=1.00 total=2000000\n",
        );
        assert_eq!(window.read(), Reading::Share(1.0, AVG10));
    }
}
