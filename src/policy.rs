//! The YAML policy: its schema, its defaults and its validation.
//!
//! Validation happens while deserializing, so every error carries the line
//! and column of the offending value. The built-in default is
//! `config/policy.yaml`, compiled in, so the documented file and the default
//! cannot drift apart.

use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use globset::{Glob, GlobMatcher};
use serde::de::Visitor;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::inventory::Labels;

/// The documented default policy, byte for byte.
pub const DEFAULT_POLICY_YAML: &str = include_str!("../config/policy.yaml");

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
}

/// The whole policy, with every default filled in.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub version: Version,
    #[serde(default)]
    pub runtime: RuntimeConfig,
    #[serde(default = "default_schedule")]
    pub schedule: Schedule,
    /// Each daemon cycle starts at a random offset within this span after
    /// its scheduled time, so a fleet does not prune at the same second.
    #[serde(default = "Age::zero")]
    pub schedule_jitter: Age,
    #[serde(default)]
    pub timezone: Timezone,
    #[serde(default)]
    pub protect: Protect,
    #[serde(default)]
    pub containers: ContainerRules,
    #[serde(default)]
    pub images: ImageRules,
    #[serde(default)]
    pub volumes: VolumeRules,
    #[serde(default)]
    pub networks: NetworkRules,
    #[serde(default)]
    pub build_cache: BuildCacheRules,
    #[serde(default)]
    pub safety: Safety,
    #[serde(default)]
    pub report: ReportConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default = "default_lock_file")]
    pub lock_file: PathBuf,
}

/// The policy format version; only `1` exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Version(u32);

impl Default for Version {
    fn default() -> Self {
        Self(1)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let v = u32::deserialize(de)?;
        if v == 1 {
            Ok(Self(v))
        } else {
            Err(serde::de::Error::custom(format!(
                "unsupported policy version {v}: this safeprune reads version 1"
            )))
        }
    }
}

/// Which runtime to talk to, and where.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    pub kind: RuntimeKind,
    pub docker: DockerConfig,
    pub containerd: ContainerdConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            kind: RuntimeKind::Auto,
            docker: DockerConfig::default(),
            containerd: ContainerdConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Auto,
    Docker,
    Containerd,
}

impl RuntimeKind {
    /// The name as the policy writes it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Docker => "docker",
            Self::Containerd => "containerd",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerConfig {
    pub endpoint: String,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            endpoint: "unix:///var/run/docker.sock".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerdConfig {
    pub endpoint: String,
    pub namespaces: Vec<String>,
}

impl Default for ContainerdConfig {
    fn default() -> Self {
        Self {
            endpoint: "/run/containerd/containerd.sock".to_owned(),
            namespaces: vec!["k8s.io".to_owned()],
        }
    }
}

/// The time zone the schedule is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Timezone {
    #[default]
    #[serde(rename = "UTC")]
    Utc,
    #[serde(rename = "local")]
    Local,
}

/// What is never removed, whatever the per-kind rules say.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Protect {
    pub labels: Vec<LabelRule>,
    pub live_pod_sandboxes: bool,
    pub pod_sandboxes: bool,
}

impl Default for Protect {
    fn default() -> Self {
        Self {
            labels: vec![
                LabelRule::from_str("io.kubernetes.container.name=istio-init")
                    .expect("the built-in label rule is valid"),
            ],
            live_pod_sandboxes: true,
            pod_sandboxes: true,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerRules {
    pub enabled: bool,
    pub min_age: Age,
}

impl Default for ContainerRules {
    fn default() -> Self {
        Self {
            enabled: true,
            min_age: Age::hours(1),
        }
    }
}

/// Which images `images` may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageMode {
    /// Only images without a tag.
    Dangling,
    /// Any image no kept container uses.
    Unused,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImageRules {
    pub enabled: bool,
    pub mode: ImageMode,
    pub min_age: Age,
    pub keep: Vec<Pattern>,
}

impl Default for ImageRules {
    fn default() -> Self {
        Self {
            enabled: true,
            mode: ImageMode::Unused,
            min_age: Age::hours(24),
            keep: ["registry.k8s.io/pause:*", "k8s.gcr.io/pause:*"]
                .into_iter()
                .map(|p| Pattern::from_str(p).expect("the built-in patterns are valid"))
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VolumeRules {
    pub enabled: bool,
    pub anonymous_only: bool,
    pub min_age: Age,
    pub keep_labels: Vec<LabelRule>,
}

impl Default for VolumeRules {
    fn default() -> Self {
        Self {
            enabled: false,
            anonymous_only: true,
            min_age: Age::hours(168),
            keep_labels: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkRules {
    pub enabled: bool,
    pub min_age: Age,
}

impl Default for NetworkRules {
    fn default() -> Self {
        Self {
            enabled: true,
            min_age: Age::hours(1),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuildCacheRules {
    pub enabled: bool,
    pub min_age: Age,
}

impl Default for BuildCacheRules {
    fn default() -> Self {
        Self {
            enabled: true,
            min_age: Age::hours(24),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Safety {
    /// A plan with more deletions than this is refused whole.
    pub max_deletions: u64,
    /// Removals in flight at once.
    pub concurrency: Concurrency,
}

impl Default for Safety {
    fn default() -> Self {
        Self {
            max_deletions: 1000,
            concurrency: Concurrency(4),
        }
    }
}

/// At least one removal at a time, at most 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Concurrency(pub usize);

impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let n = usize::deserialize(de)?;
        if (1..=64).contains(&n) {
            Ok(Self(n))
        } else {
            Err(serde::de::Error::custom(format!(
                "concurrency {n} is out of range: use 1 to 64"
            )))
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    /// Write the last run's JSON report here; empty: do not.
    pub json_path: String,
    /// A `node_exporter` textfile collector path; empty: do not.
    pub metrics_textfile: String,
    /// JSON lines, one per removal attempt; empty: do not.
    pub audit_log: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Where the daemon serves `/metrics` and `/healthz`; off by default.
    pub listen: Listen,
}

/// An address to listen on, `IP:port` (`0.0.0.0:9573`, `[::]:9573`), or
/// off when empty. Port 0 takes a free port, which the daemon logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Listen(Option<SocketAddr>);

impl Listen {
    /// The address, or `None` when the listener is off.
    #[must_use]
    pub fn addr(self) -> Option<SocketAddr> {
        self.0
    }
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Ok(Self(None));
        }
        s.parse().map(|a| Self(Some(a))).map_err(|_| {
            format!(
                "listen address \"{s}\" is not IP:port: use e.g. 0.0.0.0:9573 or [::]:9573 \
                 (no host names), or \"\" for off"
            )
        })
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(addr) => write!(f, "{addr}"),
            None => Ok(()),
        }
    }
}

impl Serialize for Listen {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_str(Parsed(PhantomData))
    }
}

/// Parses a scalar through `FromStr` inside the deserializer, so that the
/// error carries the line and column of the value itself.
struct Parsed<T>(PhantomData<T>);

impl<T: FromStr<Err = String>> Visitor<'_> for Parsed<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
}

fn default_schedule() -> Schedule {
    Schedule::from_str("0 5 * * 4").expect("the built-in schedule is valid")
}

fn default_lock_file() -> PathBuf {
    PathBuf::from("/run/safeprune.lock")
}

/// A duration written as `90m`, `1h30m`, `7d`, `45s` or `0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Age(chrono::Duration);

impl Age {
    /// No time at all.
    #[must_use]
    pub fn zero() -> Self {
        Self(chrono::Duration::zero())
    }

    #[must_use]
    pub fn hours(h: i64) -> Self {
        Self(chrono::Duration::hours(h))
    }

    /// The span as chrono's duration, for arithmetic on timestamps.
    #[must_use]
    pub fn as_duration(self) -> chrono::Duration {
        self.0
    }
}

impl FromStr for Age {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        if s == "0" {
            return Ok(Self(chrono::Duration::zero()));
        }
        let bad = || {
            format!("invalid duration '{text}': write a number with a unit: 90m, 1h30m, 7d, 45s")
        };
        let mut total: i64 = 0;
        let mut digits = String::new();
        for c in s.chars() {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            let unit = match c {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                'w' => 7 * 86_400,
                _ => return Err(bad()),
            };
            let n: i64 = digits.parse().map_err(|_| bad())?;
            digits.clear();
            total = n
                .checked_mul(unit)
                .and_then(|v| total.checked_add(v))
                .filter(|v| *v <= 100 * 365 * 86_400)
                .ok_or_else(|| format!("duration '{text}' is too long: keep it under 100 years"))?;
        }
        if !digits.is_empty() || s.is_empty() {
            return Err(bad());
        }
        Ok(Self(chrono::Duration::seconds(total)))
    }
}

impl fmt::Display for Age {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut secs = self.0.num_seconds();
        if secs == 0 {
            return f.write_str("0");
        }
        // Hours stay hours (168h, not 7d) so the printed policy reads like the file.
        for (unit, size) in [("h", 3600), ("m", 60), ("s", 1)] {
            if secs >= size {
                write!(f, "{}{unit}", secs / size)?;
                secs %= size;
            }
        }
        Ok(())
    }
}

impl Serialize for Age {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Age {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_str(Parsed::<Self>(PhantomData))
    }
}

/// A validated crontab line (5 fields, or 6 with leading seconds).
#[derive(Debug, Clone)]
pub struct Schedule {
    text: String,
    cron: croner::Cron,
}

impl Schedule {
    /// The line as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The parsed schedule, to compute the next run time.
    #[must_use]
    pub fn cron(&self) -> &croner::Cron {
        &self.cron
    }
}

impl FromStr for Schedule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let fields = text.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(format!(
                "invalid schedule '{text}': write a crontab line of 5 fields, e.g. \"0 5 * * 4\""
            ));
        }
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(text)
            .map_err(|e| format!("invalid schedule '{text}': {e}"))?;
        Ok(Self {
            text: text.to_owned(),
            cron,
        })
    }
}

impl Serialize for Schedule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Schedule {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_str(Parsed::<Self>(PhantomData))
    }
}

/// A glob, kept with the text it was written as.
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
    matcher: GlobMatcher,
}

impl Pattern {
    #[must_use]
    pub fn is_match(&self, candidate: &str) -> bool {
        self.matcher.is_match(candidate)
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for Pattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("empty pattern: write a glob such as 'registry.k8s.io/pause:*'".into());
        }
        let glob = Glob::new(text).map_err(|e| format!("invalid glob '{text}': {}", e.kind()))?;
        Ok(Self {
            text: text.to_owned(),
            matcher: glob.compile_matcher(),
        })
    }
}

impl Serialize for Pattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_str(Parsed::<Self>(PhantomData))
    }
}

/// `key` (any value) or `key=value`, where the value may be a glob.
#[derive(Debug, Clone)]
pub struct LabelRule {
    text: String,
    key: String,
    value: Option<Pattern>,
}

impl LabelRule {
    /// The label of `labels` this rule matches, if any, as `key=value`.
    #[must_use]
    pub fn matches(&self, labels: &Labels) -> Option<String> {
        let value = labels.get(&self.key)?;
        match &self.value {
            None => Some(format!("{}={value}", self.key)),
            Some(p) if p.is_match(value) => Some(format!("{}={value}", self.key)),
            Some(_) => None,
        }
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for LabelRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (key, value) = match text.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (text, None),
        };
        if key.trim().is_empty() || key.trim() != key {
            return Err(format!(
                "invalid label rule '{text}': write 'key' or 'key=value', with no spaces around the key"
            ));
        }
        let value = match value {
            // `key=` matches only the empty value.
            Some(v) => Some(Pattern {
                text: v.to_owned(),
                matcher: Glob::new(v)
                    .map_err(|e| format!("invalid label rule '{text}': {}", e.kind()))?
                    .compile_matcher(),
            }),
            None => None,
        };
        Ok(Self {
            text: text.to_owned(),
            key: key.to_owned(),
            value,
        })
    }
}

impl Serialize for LabelRule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for LabelRule {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_str(Parsed::<Self>(PhantomData))
    }
}

impl Policy {
    /// Parses a policy; `origin` names it in errors (a path, or "built-in").
    ///
    /// # Errors
    /// Any unknown key, wrong type or invalid value, with its line and column.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, PolicyError> {
        serde_yaml::from_str(text).map_err(|e| PolicyError::Invalid {
            path: origin.to_owned(),
            message: e.to_string(),
        })
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
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text, &path.display().to_string())
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

#[cfg(test)]
mod tests;
