//! `safety.pace`: removals that yield to the node's I/O.
//!
//! Before each removal batch the executor asks the [`Pacer`] whether to go
//! on. The pacer reads the node's I/O pressure (PSI, `some avg10`: the
//! share of the last ten seconds in which some task waited on I/O) and,
//! while it is above the policy's threshold, halves the removals in flight
//! and asks for a wait, up to `max_delay` in all per run; past that the
//! run goes on one removal at a time. Under the threshold the concurrency
//! doubles back to the policy's. A node without PSI runs unpaced, and says
//! so once.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::policy::Pace;

/// The longest single wait: PSI's averages move every 2 s, so a shorter
/// one would mostly read the same figure again.
pub const WAIT_STEP: Duration = Duration::from_secs(2);

/// What the pacer says before a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Go on, with at most this many removals in flight.
    Go(usize),
    /// Wait this long, then ask again.
    Wait(Duration),
}

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
            match read_some_avg10(&path) {
                Ok(_) => return Ok(Self { path }),
                Err(e) => tried.push(format!("{}: {e}", path.display())),
            }
        }
        Err(tried.join("; "))
    }

    /// The file read.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `some avg10` now, in percent.
    ///
    /// # Errors
    /// When the file cannot be read or holds no `some` line.
    pub fn read(&self) -> Result<f64, String> {
        read_some_avg10(&self.path)
    }
}

fn read_some_avg10(path: &Path) -> Result<f64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    some_avg10(&text).ok_or_else(|| "no `some avg10=` figure in it".to_owned())
}

/// The `avg10` of the `some` line of a PSI file:
/// `some avg10=1.53 avg60=0.87 avg300=0.22 total=58761459`.
#[must_use]
pub fn some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_ascii_whitespace()
        .find_map(|field| field.strip_prefix("avg10="))?
        .parse::<f64>()
        .ok()
        .filter(|p| p.is_finite() && (0.0..=100.0).contains(p))
}

/// How a run was paced: the JSON report's `pace`, the table's summary
/// line and the metrics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PaceReport {
    /// The file the pressure was read from; `null` when the node has none
    /// (the run was not paced).
    pub source: Option<String>,
    /// The policy's threshold, percent of `some avg10`.
    pub io_pressure_percent: f64,
    /// The policy's most waiting per run, seconds.
    pub max_delay_seconds: u64,
    /// Time spent waiting for the pressure to fall, seconds (3 decimals).
    pub paced_seconds: f64,
    /// How many times the pressure was read.
    pub readings: u64,
    /// The highest pressure read, percent; `null` with no reading.
    pub max_io_pressure_percent: Option<f64>,
    /// The fewest removals in flight it came down to.
    pub lowest_concurrency: usize,
    /// The pressure stayed high past `max_delay`: the rest went one at a
    /// time without waiting.
    pub delay_exhausted: bool,
}

impl fmt::Display for PaceReport {
    /// The table's summary line, after `paced: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let threshold = self.io_pressure_percent;
        let Some(max) = self.max_io_pressure_percent else {
            return if self.source.is_none() {
                f.write_str("no, the node shows no I/O pressure (PSI)")
            } else {
                f.write_str("no removal batch to pace")
            };
        };
        if self.paced_seconds == 0.0 && max <= threshold {
            return write!(
                f,
                "not needed (I/O pressure up to {max:.1}%, threshold {threshold}%)"
            );
        }
        write!(
            f,
            "waited {:.1}s for I/O pressure (up to {max:.1}%, threshold {threshold}%), \
             concurrency down to {}",
            self.paced_seconds, self.lowest_concurrency
        )?;
        if self.delay_exhausted {
            write!(
                f,
                "; max_delay {}s spent, the rest one at a time",
                self.max_delay_seconds
            )?;
        }
        Ok(())
    }
}

/// Reads the pressure: a PSI file on a node, a list of figures in tests.
type Reader = Box<dyn FnMut() -> Option<f64> + Send>;

/// Decides, before each removal batch, how many removals may be in flight
/// and whether to wait first (see the module).
pub struct Pacer {
    pace: Option<Pace>,
    source: Option<String>,
    read: Option<Reader>,
    /// The policy's concurrency: what the pacer climbs back to.
    most: usize,
    limit: usize,
    lowest: usize,
    waited: Duration,
    readings: u64,
    max_seen: Option<f64>,
    exhausted: bool,
}

impl Pacer {
    /// The pacer `policy` asks for, reading this node's PSI; a node
    /// without it is warned about once, here.
    #[must_use]
    pub fn for_policy(policy: &crate::policy::Policy) -> Self {
        let most = policy.safety.concurrency.0;
        let Some(pace) = policy.safety.pace else {
            return Self::new(None, most, None, None);
        };
        match PsiSource::find(Path::new("/")) {
            Ok(source) => {
                let path = source.path().display().to_string();
                let mut warned = false;
                let read = move || match source.read() {
                    Ok(p) => Some(p),
                    Err(e) => {
                        if !warned {
                            tracing::warn!(path = %source.path().display(), error = %e, "safety.pace: cannot read the I/O pressure: not pacing while it stays unreadable");
                            warned = true;
                        }
                        None
                    }
                };
                Self::new(Some(pace), most, Some(path), Some(Box::new(read)))
            }
            Err(tried) => {
                tracing::warn!(
                    tried = %tried,
                    "safety.pace: this node shows no I/O pressure (PSI): removals are not paced"
                );
                Self::new(Some(pace), most, None, None)
            }
        }
    }

    /// A pacer over `read`; `pace` `None`: never pacing.
    #[must_use]
    pub fn new(
        pace: Option<Pace>,
        most: usize,
        source: Option<String>,
        read: Option<Reader>,
    ) -> Self {
        let most = most.max(1);
        Self {
            pace,
            source,
            read,
            most,
            limit: most,
            lowest: most,
            waited: Duration::ZERO,
            readings: 0,
            max_seen: None,
            exhausted: false,
        }
    }

    /// At most this many removals in flight now.
    #[must_use]
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Before a batch: go on (with how many in flight), or wait first.
    pub fn gate(&mut self) -> Gate {
        let (Some(pace), Some(read)) = (self.pace, self.read.as_mut()) else {
            return Gate::Go(self.limit);
        };
        let Some(pressure) = read() else {
            return Gate::Go(self.limit);
        };
        self.readings += 1;
        self.max_seen = Some(self.max_seen.map_or(pressure, |m| m.max(pressure)));
        if pressure <= pace.io_pressure_percent {
            self.limit = (self.limit * 2).min(self.most);
            return Gate::Go(self.limit);
        }
        self.limit = (self.limit / 2).max(1);
        self.lowest = self.lowest.min(self.limit);
        let budget = max_delay(pace).saturating_sub(self.waited);
        if budget.is_zero() {
            if !self.exhausted {
                tracing::warn!(
                    pressure,
                    threshold = pace.io_pressure_percent,
                    "safety.pace: I/O pressure still high after max_delay: going on one removal at a time"
                );
            }
            self.exhausted = true;
            self.limit = 1;
            self.lowest = 1;
            return Gate::Go(1);
        }
        tracing::info!(
            pressure,
            threshold = pace.io_pressure_percent,
            concurrency = self.limit,
            "safety.pace: I/O pressure high, waiting"
        );
        Gate::Wait(budget.min(WAIT_STEP))
    }

    /// Counts a wait that lasted `d`.
    pub fn waited(&mut self, d: Duration) {
        self.waited += d;
    }

    /// How the run was paced; `None` when `safety.pace` is off.
    #[must_use]
    pub fn report(&self) -> Option<PaceReport> {
        let pace = self.pace?;
        Some(PaceReport {
            source: self.source.clone(),
            io_pressure_percent: pace.io_pressure_percent,
            max_delay_seconds: max_delay(pace).as_secs(),
            paced_seconds: (self.waited.as_secs_f64() * 1000.0).round() / 1000.0,
            readings: self.readings,
            max_io_pressure_percent: self.max_seen,
            lowest_concurrency: self.lowest,
            delay_exhausted: self.exhausted,
        })
    }
}

fn max_delay(pace: Pace) -> Duration {
    pace.max_delay
        .as_duration()
        .to_std()
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Age;

    fn pace(threshold: f64, max_delay_secs: &str) -> Pace {
        Pace {
            io_pressure_percent: threshold,
            max_delay: max_delay_secs.parse::<Age>().unwrap(),
        }
    }

    /// A pacer reading `figures` in turn (`None`: an unreadable file).
    fn reading(pace: Pace, most: usize, figures: Vec<Option<f64>>) -> Pacer {
        let mut figures = figures.into_iter();
        Pacer::new(
            Some(pace),
            most,
            Some("/proc/pressure/io".into()),
            Some(Box::new(move || figures.next().expect("a figure left"))),
        )
    }

    #[test]
    fn the_some_lines_avg10_is_the_pressure() {
        let text = "some avg10=12.34 avg60=0.87 avg300=0.22 total=58761459\n\
                    full avg10=99.00 avg60=0.50 avg300=0.10 total=1000\n";
        assert_eq!(some_avg10(text), Some(12.34));
        assert_eq!(
            some_avg10("full avg10=1.00 avg60=0 avg300=0 total=0\n"),
            None
        );
        assert_eq!(some_avg10("some avg10=junk\n"), None);
        assert_eq!(some_avg10("some avg10=250.00\n"), None);
        assert_eq!(some_avg10(""), None);
    }

    #[test]
    fn under_the_threshold_nothing_waits() {
        let mut p = reading(pace(10.0, "1m"), 4, vec![Some(2.0), Some(10.0)]);
        assert_eq!(p.gate(), Gate::Go(4));
        assert_eq!(p.gate(), Gate::Go(4), "at the threshold is not above it");
        let r = p.report().unwrap();
        assert!(r.paced_seconds.abs() < f64::EPSILON);
        assert_eq!(r.readings, 2);
        assert_eq!(r.max_io_pressure_percent, Some(10.0));
        assert_eq!(r.lowest_concurrency, 4);
        assert!(!r.delay_exhausted);
        assert_eq!(
            r.to_string(),
            "not needed (I/O pressure up to 10.0%, threshold 10%)"
        );
    }

    #[test]
    fn above_it_the_concurrency_halves_and_it_waits_then_climbs_back() {
        let mut p = reading(
            pace(10.0, "1m"),
            8,
            vec![
                Some(40.0),
                Some(30.0),
                Some(20.0),
                Some(5.0),
                Some(5.0),
                Some(5.0),
            ],
        );
        assert_eq!(p.gate(), Gate::Wait(WAIT_STEP));
        assert_eq!(p.limit(), 4);
        p.waited(WAIT_STEP);
        assert_eq!(p.gate(), Gate::Wait(WAIT_STEP));
        p.waited(WAIT_STEP);
        assert_eq!(p.gate(), Gate::Wait(WAIT_STEP));
        assert_eq!(p.limit(), 1);
        p.waited(WAIT_STEP);
        assert_eq!(p.gate(), Gate::Go(2));
        assert_eq!(p.gate(), Gate::Go(4));
        assert_eq!(p.gate(), Gate::Go(8));
        let r = p.report().unwrap();
        assert!((r.paced_seconds - 6.0).abs() < f64::EPSILON);
        assert_eq!(r.max_io_pressure_percent, Some(40.0));
        assert_eq!(r.lowest_concurrency, 1);
        assert_eq!(
            r.to_string(),
            "waited 6.0s for I/O pressure (up to 40.0%, threshold 10%), concurrency down to 1"
        );
    }

    #[test]
    fn past_max_delay_it_goes_on_one_at_a_time_without_waiting() {
        let mut p = reading(
            pace(10.0, "3s"),
            4,
            vec![Some(50.0), Some(50.0), Some(50.0), Some(1.0)],
        );
        assert_eq!(p.gate(), Gate::Wait(WAIT_STEP));
        p.waited(WAIT_STEP);
        // What is left of the budget, not a whole step.
        assert_eq!(p.gate(), Gate::Wait(Duration::from_secs(1)));
        p.waited(Duration::from_secs(1));
        assert_eq!(p.gate(), Gate::Go(1));
        assert!(p.report().unwrap().delay_exhausted);
        // Once the pressure falls it climbs back, without waiting again.
        assert_eq!(p.gate(), Gate::Go(2));
        let r = p.report().unwrap();
        assert!((r.paced_seconds - 3.0).abs() < f64::EPSILON);
        assert!(
            r.to_string()
                .ends_with("; max_delay 3s spent, the rest one at a time"),
            "{r}"
        );
    }

    #[test]
    fn an_unreadable_pressure_does_not_pace() {
        let mut p = reading(pace(10.0, "1m"), 4, vec![None, Some(50.0)]);
        assert_eq!(p.gate(), Gate::Go(4));
        assert_eq!(p.report().unwrap().readings, 0);
        assert_eq!(p.gate(), Gate::Wait(WAIT_STEP));
    }

    #[test]
    fn off_it_never_reads() {
        let mut p = Pacer::new(None, 3, None, Some(Box::new(|| panic!("read while off"))));
        assert_eq!(p.gate(), Gate::Go(3));
        assert_eq!(p.report(), None);
    }

    #[test]
    fn no_psi_says_so() {
        let p = Pacer::new(Some(pace(10.0, "1m")), 4, None, None);
        let r = p.report().unwrap();
        assert_eq!(r.source, None);
        assert_eq!(r.to_string(), "no, the node shows no I/O pressure (PSI)");
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
        assert_eq!(source.read(), Ok(3.0));
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
            tried.contains("sys/fs/cgroup/io.pressure: no `some avg10=`"),
            "{tried}"
        );
    }
}
