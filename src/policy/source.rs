//! Where the policy comes from and how it is loaded: the source
//! (`--config`, `$SAFEPRUNE_CONFIG`, the system file, the built-in
//! default), the entry points that parse it, [`PolicyError`], and the place
//! a YAML error is reported at.

use std::fmt;
use std::path::{Path, PathBuf};

use super::kubelet::KubeletImageGc;
use super::read::{MAX_POLICY_BYTES, read_policy_file};
use super::scan;
use super::schema::{DiskWatermarks, Policy};

/// The documented default policy, byte for byte.
pub const DEFAULT_POLICY_YAML: &str = include_str!("../../config/policy.yaml");

/// The keys whose value may be written as null, because docs/contracts.md says
/// what null means there. Anywhere else, an empty or null value is refused.
pub(super) const NULLABLE: &[&str] = &["images.disk", "safety.pace"];

/// Where the policy is read from when nothing else is said.
pub const SYSTEM_POLICY_PATH: &str = "/etc/safeprune/policy.yaml";

/// Why a policy could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid policy {path}: {message}")]
    Invalid { path: String, message: String },
    /// Running as root, and someone else could change the file.
    #[error(
        "refusing policy {}: {why}; whoever can write it decides what root deletes",
        path.display()
    )]
    Untrusted { path: PathBuf, why: String },
    /// kubelet's configuration (`images.disk.from_kubelet`) cannot be
    /// read, or is not one kubelet would accept.
    #[error(
        "cannot use kubelet's configuration {} (images.disk.from_kubelet): {message}",
        path.display()
    )]
    Kubelet { path: PathBuf, message: String },
}

impl Policy {
    /// Parses a policy; `origin` names it in errors (a path, or "built-in").
    ///
    /// # Errors
    /// Any unknown key, wrong type or invalid value, with its line and column.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, PolicyError> {
        let invalid = |message: String| PolicyError::Invalid {
            path: origin.to_owned(),
            message,
        };
        if text.len() > MAX_POLICY_BYTES {
            return Err(invalid(format!(
                "{} bytes, more than a policy's limit of {MAX_POLICY_BYTES} (1 MiB)",
                text.len()
            )));
        }
        // YAML allows a byte order mark before the document.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        // Bounds and faults serde would not see, before it parses at all.
        scan::scan(text, NULLABLE).map_err(|fault| invalid(fault.to_string()))?;
        serde_yaml::from_str(text).map_err(|e| invalid(located(&e)))
    }

    /// The built-in default, identical to `config/policy.yaml`.
    ///
    /// # Panics
    /// Never: a test proves the compiled-in file parses.
    #[must_use]
    pub fn builtin() -> Self {
        Self::from_yaml(DEFAULT_POLICY_YAML, "built-in").expect("config/policy.yaml is valid")
    }

    /// Reads a policy file.
    ///
    /// # Errors
    /// The file cannot be read, or is not a valid policy.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = read_policy_file(path)?;
        Self::from_yaml(&text, &path.display().to_string())
    }

    /// kubelet's image garbage collection, when `images.disk.from_kubelet`
    /// set the watermarks.
    #[must_use]
    pub fn kubelet(&self) -> Option<&KubeletImageGc> {
        self.images.disk.as_ref()?.kubelet.as_deref()
    }

    /// What `images.disk.from_kubelet` derived and from where, as `check`
    /// and `plan` print it; `None` without it.
    #[must_use]
    pub fn kubelet_summary(&self) -> Option<String> {
        let kubelet = self.kubelet()?;
        let min_age = self.images.min_age;
        let stricter = if min_age >= kubelet.minimum_gc_age.value {
            format!(" (images.min_age {min_age} is the stricter, and applies)")
        } else {
            String::new()
        };
        Some(format!("{kubelet}{stricter}"))
    }

    /// kubelet's configuration read again, for a run or a daemon cycle:
    /// kubelet applies its file when it restarts, and the watermarks
    /// follow it. `Some`: the policy with what changed (boxed: the
    /// daemon's future holds it), which is logged; `None`: no
    /// `from_kubelet`, or nothing changed.
    ///
    /// # Errors
    /// The file can no longer be read, or kubelet would not accept it.
    pub fn kubelet_reread(&self) -> Result<Option<Box<Self>>, PolicyError> {
        let Some(before) = self.kubelet() else {
            return Ok(None);
        };
        let now = KubeletImageGc::read(&before.path)?;
        if &now == before {
            return Ok(None);
        }
        tracing::info!(
            path = %now.path.display(),
            before = %before,
            now = %now,
            "kubelet's configuration changed: the disk watermarks follow it"
        );
        let mut policy = Box::new(self.clone());
        policy.images.disk = Some(DiskWatermarks::from_kubelet(now));
        Ok(Some(policy))
    }

    /// The policy rendered back as YAML, every default filled in.
    ///
    /// # Panics
    /// Never: every field serializes to plain YAML.
    #[must_use]
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self).expect("a policy always serializes")
    }
}

/// The YAML reader's error, with its place and, for the faults serde words
/// itself, what to write instead (`hints.rs`). `yaml_serde` prints no place
/// for line 1 column 1 (it takes a zero mark for "none"), so an unknown key
/// on the first line would be the one fault without a place; the marks of
/// libyaml's byte-offset errors are zero too, and are left as they are.
fn located(e: &serde_yaml::Error) -> String {
    let message = e.to_string();
    let Some(at) = e.location() else {
        return message;
    };
    if message.contains(" at position ") {
        return message;
    }
    let place = format!(" at line {} column {}", at.line(), at.column());
    match message.strip_suffix(&place) {
        Some(fault) => format!("{}{place}", super::hints::explain(fault)),
        None if at.index() == 0 => format!("{}{place}", super::hints::explain(&message)),
        None => message,
    }
}

/// Where the policy comes from: `--config`, `$SAFEPRUNE_CONFIG`, the system
/// file if it exists, else the built-in default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    File(PathBuf),
    Builtin,
}

/// The file's path, or that it is the built-in default, as `check` says.
impl fmt::Display for PolicySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Builtin => write!(
                f,
                "the built-in default (no --config, no $SAFEPRUNE_CONFIG, no {SYSTEM_POLICY_PATH})"
            ),
        }
    }
}

impl PolicySource {
    /// Resolves the source in the documented order.
    #[must_use]
    pub fn resolve(flag: Option<&Path>, env: Option<&str>) -> Self {
        if let Some(p) = flag {
            return Self::File(p.to_owned());
        }
        if let Some(p) = env.filter(|p| !p.is_empty()) {
            return Self::File(PathBuf::from(p));
        }
        let system = Path::new(SYSTEM_POLICY_PATH);
        if system.exists() {
            Self::File(system.to_owned())
        } else {
            Self::Builtin
        }
    }

    /// Loads the policy from this source.
    ///
    /// # Errors
    /// The file cannot be read or is not a valid policy.
    pub fn load(&self) -> Result<Policy, PolicyError> {
        match self {
            Self::File(p) => Policy::load(p),
            Self::Builtin => Ok(Policy::builtin()),
        }
    }
}
