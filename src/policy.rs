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

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::de::Visitor;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::inventory::Labels;

mod read;
mod scan;
mod trust;

pub use read::{MAX_POLICY_BYTES, read_policy_file};

/// The documented default policy, byte for byte.
pub const DEFAULT_POLICY_YAML: &str = include_str!("../config/policy.yaml");

/// The keys whose value may be written as null, because docs/design.md says
/// what null means there. Anywhere else, an empty or null value is refused.
const NULLABLE: &[&str] = &["images.disk"];

/// The longest glob or label rule accepted: longer than any image
/// reference (at most 255 characters for the name, 128 for the tag).
pub const MAX_PATTERN_CHARS: usize = 1024;

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
    #[serde(default = "default_lock_file", deserialize_with = "absolute_path")]
    pub lock_file: PathBuf,
    /// Where safeprune keeps what it must remember between runs: the
    /// images' usage history.
    #[serde(default = "default_state_dir", deserialize_with = "absolute_path")]
    pub state_dir: PathBuf,
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
        de.deserialize_u64(Integer(|v| {
            if v == 1 {
                Ok(Self(1))
            } else {
                Err(format!(
                    "unsupported policy version {v}: this safeprune reads version 1"
                ))
            }
        }))
    }
}

/// Which runtime to talk to, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerConfig {
    #[serde(deserialize_with = "endpoint")]
    pub endpoint: String,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            endpoint: "unix:///var/run/docker.sock".to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerdConfig {
    #[serde(deserialize_with = "endpoint")]
    pub endpoint: String,
    #[serde(deserialize_with = "texts")]
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
    /// Always `true`: pod sandboxes are kubelet's on every runtime. `false`
    /// is refused when the policy is read (it deleted sandboxes on Docker
    /// and was refused by the containerd adapter; issue 22). The key stays
    /// so that policies which spell out the default keep working.
    #[serde(deserialize_with = "always_true")]
    pub pod_sandboxes: bool,
}

/// `true`, the one value `protect.pod_sandboxes` takes.
fn always_true<'de, D: Deserializer<'de>>(de: D) -> Result<bool, D::Error> {
    if bool::deserialize(de)? {
        Ok(true)
    } else {
        Err(serde::de::Error::custom(
            "pod_sandboxes: false is not supported: pod sandboxes belong to kubelet, and \
             safeprune removes none on any runtime (removing one behind kubelet breaks its \
             pod's bookkeeping); remove the key, or write true",
        ))
    }
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
    /// Keep the N most recently used images of each repository; 0: none.
    pub keep_recent: u32,
    /// Prune only under disk pressure, least recently used first; `None`:
    /// by the age rules alone.
    pub disk: Option<DiskWatermarks>,
}

/// When images are pruned by disk pressure: while the image store's file
/// system is fuller than `high_percent`, until it is at `low_percent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DiskWatermarks {
    pub high_percent: u8,
    pub low_percent: u8,
}

impl<'de> Deserialize<'de> for DiskWatermarks {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Written {
            #[serde(default = "default_high_percent")]
            high_percent: u64,
            #[serde(default = "default_low_percent")]
            low_percent: u64,
        }
        let w = Written::deserialize(de)?;
        let percent = |v: u64| u8::try_from(v).ok().filter(|p| *p <= 100);
        match (percent(w.high_percent), percent(w.low_percent)) {
            (Some(high_percent), Some(low_percent)) if low_percent < high_percent => Ok(Self {
                high_percent,
                low_percent,
            }),
            _ => Err(serde::de::Error::custom(format!(
                "disk watermarks high_percent {} and low_percent {} do not fit: write whole \
                 percents from 0 to 100, low_percent under high_percent (e.g. 85 and 70)",
                w.high_percent, w.low_percent
            ))),
        }
    }
}

fn default_high_percent() -> u64 {
    85
}

fn default_low_percent() -> u64 {
    70
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
            keep_recent: 0,
            disk: None,
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
    /// `run --plan` refuses a plan older than this.
    pub max_plan_age: Age,
}

impl Default for Safety {
    fn default() -> Self {
        Self {
            max_deletions: 1000,
            concurrency: Concurrency(4),
            max_plan_age: Age::hours(24),
        }
    }
}

/// At least one removal at a time, at most 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Concurrency(pub usize);

impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_u64(Integer(|n| match usize::try_from(n) {
            Ok(n) if (1..=64).contains(&n) => Ok(Self(n)),
            _ => Err(format!("concurrency {n} is out of range: use 1 to 64")),
        }))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    /// Write the last run's JSON report here; empty: do not.
    #[serde(deserialize_with = "report_path")]
    pub json_path: String,
    /// A `node_exporter` textfile collector path; empty: do not.
    #[serde(deserialize_with = "report_path")]
    pub metrics_textfile: String,
    /// JSON lines, one per removal attempt; empty: do not.
    #[serde(deserialize_with = "report_path")]
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
///
/// Through `deserialize_str`, the YAML reader hands over any scalar as the
/// text it was written as: right for a value whose own syntax refuses a
/// bool or a number (a duration, where `0` is one). Through
/// `deserialize_any`, an unquoted `true`, `5` or `1.10` arrives as what YAML
/// reads it as, and is refused: right for a value that any text is (a glob,
/// a label rule, a name), where `true` would be taken as the text "true"
/// and `1.10` as "1.1" without a word.
struct Parsed<T>(PhantomData<T>);

impl<T: FromStr<Err: fmt::Display>> Visitor<'_> for Parsed<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        let parsed = v.parse().map_err(E::custom)?;
        control_fault(v).map_or(Ok(parsed), |e| Err(E::custom(e)))
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<T, E> {
        Err(E::custom(not_text(format_args!("the boolean {v}"))))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<T, E> {
        Err(E::custom(not_text(format_args!("the number {v}"))))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<T, E> {
        Err(E::custom(not_text(format_args!("the number {v}"))))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<T, E> {
        Err(E::custom(not_text(format_args!("the number {v}"))))
    }
}

/// Why an unquoted scalar is not the string expected. YAML may read it as
/// another value than it was written (`1.10` is 1.1, `0x10` is 16), so
/// the message names what it read.
fn not_text(read_as: fmt::Arguments<'_>) -> String {
    format!(
        "expected a string, and YAML reads this unquoted value as {read_as}: quote it if it is \
         meant as text"
    )
}

/// Why a value cannot hold the control character it does, if it does (a
/// `"\u0001"` escape): no path, glob, label or name has one, and one does
/// not show in an error or a terminal. Tab and line feed are spacing a
/// block scalar or a crontab line may hold.
fn control_fault(text: &str) -> Option<String> {
    let c = text
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\t' | '\n'))?;
    Some(format!(
        "the value holds a control character (U+{:04X}): remove it",
        u32::from(c)
    ))
}

/// A list of strings that may be any text: each one a string as written,
/// never a bool or number YAML read (see [`Parsed`]).
fn texts<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    struct Text(String);
    impl<'de> Deserialize<'de> for Text {
        fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
            de.deserialize_any(Parsed::<String>(PhantomData)).map(Self)
        }
    }
    let list = Vec::<Text>::deserialize(de)?;
    Ok(list.into_iter().map(|Text(text)| text).collect())
}

/// Reads an unsigned integer and checks it inside the deserializer, so that
/// the error carries the line and column of the value itself.
struct Integer<F>(F);

impl<T, F: FnOnce(u64) -> Result<T, String>> Visitor<'_> for Integer<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<T, E> {
        (self.0)(v).map_err(E::custom)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<T, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!("{v} is negative: write a whole number"))),
        }
    }
}

/// Checks a string value inside the deserializer (see [`Parsed`]).
struct Checked<F>(F);

impl<F: FnOnce(&str) -> Result<(), String>> Visitor<'_> for Checked<F> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        (self.0)(v).map_err(E::custom)?;
        control_fault(v).map_or_else(|| Ok(v.to_owned()), |e| Err(E::custom(e)))
    }
}

/// Why `text` cannot be a path safeprune writes to or locks, if it cannot:
/// only an absolute path is certain to name the same file from cron, from
/// systemd and from a shell.
fn path_fault(text: &str) -> Option<String> {
    if text.contains('\0') {
        Some(format!("path {text:?} contains a NUL byte"))
    } else if text.starts_with('~') {
        Some(format!(
            "path '{text}' starts with '~', which safeprune does not expand: write the full path, starting with '/'"
        ))
    } else if !text.starts_with('/') {
        Some(format!(
            "path '{text}' is not absolute: write the full path, starting with '/'"
        ))
    } else {
        None
    }
}

/// `lock_file`: an absolute path.
fn absolute_path<'de, D: Deserializer<'de>>(de: D) -> Result<PathBuf, D::Error> {
    de.deserialize_str(Checked(|text: &str| path_fault(text).map_or(Ok(()), Err)))
        .map(PathBuf::from)
}

/// A report path: an absolute path, or `""` for none.
fn report_path<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    de.deserialize_str(Checked(|text: &str| {
        if text.is_empty() {
            return Ok(());
        }
        path_fault(text).map_or(Ok(()), |e| Err(format!("{e} (or \"\" for none)")))
    }))
}

/// An engine endpoint: a unix socket, `unix:///path` or `/path`.
fn endpoint<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    de.deserialize_str(Checked(|text: &str| {
        let path = text.strip_prefix("unix://").unwrap_or(text);
        if path.starts_with('/') && !path.contains('\0') {
            Ok(())
        } else {
            Err(format!(
                "endpoint {text:?} is not a unix socket: write unix:///path/to.sock or \
                 /path/to.sock (only unix sockets are supported)"
            ))
        }
    }))
}

fn default_schedule() -> Schedule {
    Schedule::from_str("0 5 * * 4").expect("the built-in schedule is valid")
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/safeprune")
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
        check_crontab_characters(text)?;
        let fields: Vec<&str> = text.split_ascii_whitespace().collect();
        if !(5..=6).contains(&fields.len()) {
            return Err(format!(
                "invalid schedule '{text}': write a crontab line of 5 fields, e.g. \"0 5 * * 4\""
            ));
        }
        // croner reads `1,` as `1`: `1, 5 * * *` would run at 05:01 where
        // `1,5 * * * *` was meant.
        if let Some(field) = fields.iter().find(|f| f.split(',').any(str::is_empty)) {
            return Err(format!(
                "invalid schedule '{text}': the field '{field}' has an empty list entry: write \
                 a list with no spaces or stray commas, e.g. 1,5"
            ));
        }
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(text)
            .map_err(|e| format!("invalid schedule '{text}': {e}"))?;
        // `0 5 30 2 *` parses, and names no time ever: the daemon would have
        // nothing to wait for. croner searches up to the year 5000.
        if cron
            .find_next_occurrence(&chrono::Utc::now(), false)
            .is_err()
        {
            return Err(format!(
                "schedule '{text}' never fires (no such date): check the day of month and month"
            ));
        }
        Ok(Self {
            text: text.to_owned(),
            cron,
        })
    }
}

/// Refuses what croner takes and a crontab would not: a space that is not
/// one to cron (a no-break space, an em space, as pasted from a web page:
/// croner splits fields at any Unicode space, cron at spaces and tabs
/// only), or any other character that is not plain ASCII.
fn check_crontab_characters(text: &str) -> Result<(), String> {
    // A block scalar (`schedule: |`) ends the line with a line feed.
    let Some(c) = text
        .chars()
        .find(|c| !c.is_ascii_graphic() && !matches!(c, ' ' | '\t' | '\n'))
    else {
        return Ok(());
    };
    let what = if c.is_whitespace() {
        "is not a plain space: separate the fields with spaces"
    } else {
        "is not plain ASCII: write the line as in a crontab, e.g. \"0 5 * * 4\""
    };
    Err(format!(
        "invalid schedule '{}': U+{:04X} {what}",
        text.escape_debug(),
        u32::from(c)
    ))
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
    matcher: GlobSet,
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
        Self::glob(text, text)
    }
}

impl Pattern {
    /// Compiles `glob`; errors quote `whole`, the text it came from.
    fn glob(glob: &str, whole: &str) -> Result<Self, String> {
        let chars = whole.chars().count();
        if chars > MAX_PATTERN_CHARS {
            let start: String = whole.chars().take(40).collect();
            return Err(format!(
                "pattern '{start}…' is {chars} characters long, more than {MAX_PATTERN_CHARS}: \
                 no image reference or label is that long"
            ));
        }
        let invalid = |e: &globset::Error| format!("invalid glob '{whole}': {}", e.kind());
        let compiled = Glob::new(glob).map_err(|e| invalid(&e))?;
        // A GlobSet reports a pattern too large to compile; a GlobMatcher
        // would panic.
        let matcher = GlobSetBuilder::new()
            .add(compiled)
            .build()
            .map_err(|e| invalid(&e))?;
        Ok(Self {
            text: glob.to_owned(),
            matcher,
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
        // Any text is a glob: `5` must be written "5" (see `Parsed`).
        de.deserialize_any(Parsed::<Self>(PhantomData))
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
            Some(v) => {
                Some(Pattern::glob(v, text).map_err(|e| format!("invalid label rule: {e}"))?)
            }
            None if text.chars().count() > MAX_PATTERN_CHARS => {
                return Err(format!(
                    "invalid label rule: a key of {} characters, more than {MAX_PATTERN_CHARS}",
                    text.chars().count()
                ));
            }
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
        // Any text is a label key: `true` must be written "true" (see `Parsed`).
        de.deserialize_any(Parsed::<Self>(PhantomData))
    }
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

    /// The policy rendered back as YAML, every default filled in.
    ///
    /// # Panics
    /// Never: every field serializes to plain YAML.
    #[must_use]
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self).expect("a policy always serializes")
    }
}

/// The YAML reader's error, with its place. `yaml_serde` prints no place for
/// line 1 column 1 (it takes a zero mark for "none"), so an unknown key
/// on the first line would be the one fault without a place; the marks of
/// libyaml's byte-offset errors are zero too, and are left as they are.
fn located(e: &serde_yaml::Error) -> String {
    let message = e.to_string();
    match e.location() {
        Some(at) if at.index() == 0 && !message.contains(" at position ") => {
            format!("{message} at line 1 column 1")
        }
        _ => message,
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
mod props;
#[cfg(test)]
mod tests;
