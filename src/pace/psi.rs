//! Reading PSI, the kernel's pressure stall information: the `some` line
//! (`some avg10=1.53 avg60=0.87 avg300=0.22 total=58761459`) of an
//! `io.pressure` or `cpu.pressure` file, and where a node shows its own
//! (`/proc/pressure/io`, or this process's cgroup where a container sees
//! only that).
//!
//! The pacer needs the stall of the last fraction of a second, not of the
//! last ten: `avg10` moves every 2 s and is a ten-second average, so a
//! run's own removals show in it late and long after. It reads `total`
//! (microseconds in which some task waited, since boot) and takes the
//! growth between two readings.

use std::path::{Path, PathBuf};
use std::time::Duration;

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

    /// The PSI file at `path`, read or not.
    #[must_use]
    pub fn at(path: PathBuf) -> Self {
        Self { path }
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

    /// `some total` and `some avg10` now.
    fn read(&self) -> Result<(Duration, f64), String> {
        let text = self.text()?;
        match (some_total(&text), some_avg10(&text)) {
            (Some(total), Some(avg10)) => Ok((total, avg10)),
            _ => Err("no `some avg10=... total=` figures in it".to_owned()),
        }
    }
}

/// The fields of the `some` line of a PSI file.
fn some_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_ascii_whitespace()
        .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
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

#[cfg(test)]
pub(super) mod tests {
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

    /// Writes `text` to `path` under `root`, its directories made.
    pub(in crate::pace) fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A PSI file's text.
    pub(in crate::pace) const PSI: &str =
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
}
