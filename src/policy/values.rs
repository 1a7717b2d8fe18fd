//! The policy's values: what one setting may be, each checked as it is
//! read. Durations ([`Age`]), crontab lines ([`Schedule`]), globs
//! ([`Pattern`]), label rules ([`LabelRule`]), listen addresses, bounded
//! numbers; the deserialize helpers behind them and behind the schema's
//! paths and endpoints are in `deserialize`.

use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::de::Visitor;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::inventory::Labels;
use deserialize::{Integer, Parsed};
pub(super) use deserialize::{
    absolute_path, added_percent, endpoint, keep_recent, kubelet_config_path, max_deletions,
    percent, report_path, texts, whole_percent, workloads_cgroup,
};

mod deserialize;

/// The longest glob or label rule accepted: longer than any image
/// reference (at most 255 characters for the name, 128 for the tag).
pub const MAX_PATTERN_CHARS: usize = 1024;

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
        de.deserialize_any(Integer {
            check: |v| {
                if v == 1 {
                    Ok(Self(1))
                } else {
                    Err(format!(
                        "unsupported policy version {v}: this safeprune reads version 1"
                    ))
                }
            },
            example: "1",
        })
    }
}

/// Removals in flight at once: a fixed number, 1 to 64, or `auto`, as many
/// as the engine keeps up with (`execute::adapt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Exactly this many at most.
    Fixed(usize),
    /// From 4, climbing while the engine keeps up, to at most 32.
    Auto,
}

impl Serialize for Concurrency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Fixed(n) => s.serialize_u64(*n as u64),
            Self::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Either;
        impl Visitor<'_> for Either {
            type Value = Concurrency;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number from 1 to 64, or auto")
            }

            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Concurrency, E> {
                match usize::try_from(n) {
                    Ok(n) if (1..=64).contains(&n) => Ok(Concurrency::Fixed(n)),
                    _ => Err(E::custom(format!(
                        "concurrency {n} is out of range: use 1 to 64, or auto"
                    ))),
                }
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Concurrency, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "concurrency {v} is out of range: use 1 to 64, or auto"
                    ))),
                }
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Concurrency, E> {
                Err(E::custom(format!(
                    "concurrency {v:?} is not a whole number: use 1 to 64, or auto"
                )))
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Concurrency, E> {
                Err(E::custom(format!(
                    "concurrency {v} is not a number: use 1 to 64, or auto"
                )))
            }

            fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Concurrency, E> {
                Err(E::custom(format!(
                    "concurrency {v} is out of range: use 1 to 64, or auto"
                )))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Concurrency, E> {
                if v == "auto" {
                    Ok(Concurrency::Auto)
                } else {
                    Err(E::custom(format!(
                        "concurrency {v:?} is not a number: use 1 to 64, or auto"
                    )))
                }
            }
        }
        de.deserialize_any(Either)
    }
}

/// `images.keep_unpullable`: whether an image with a name no registry can
/// give back is kept. `auto` keeps them on Kubernetes nodes (a CRI runtime,
/// or kubelet's containers seen on Docker) and not on a plain Docker host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeepUnpullable {
    #[default]
    Auto,
    /// `true`: kept on every node.
    Always,
    /// `false`: pruned by the other rules, as any image.
    Never,
}

impl KeepUnpullable {
    /// Whether it keeps on a node that is (`true`) or is not a Kubernetes
    /// node.
    #[must_use]
    pub fn keeps(self, kubernetes_node: bool) -> bool {
        match self {
            Self::Auto => kubernetes_node,
            Self::Always => true,
            Self::Never => false,
        }
    }
}

impl fmt::Display for KeepUnpullable {
    /// As the policy writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Always => "true",
            Self::Never => "false",
        })
    }
}

impl Serialize for KeepUnpullable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Always => s.serialize_bool(true),
            Self::Never => s.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for KeepUnpullable {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Either;
        impl Visitor<'_> for Either {
            type Value = KeepUnpullable;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("auto, true or false")
            }

            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<KeepUnpullable, E> {
                Ok(if v {
                    KeepUnpullable::Always
                } else {
                    KeepUnpullable::Never
                })
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KeepUnpullable, E> {
                match v {
                    "auto" => Ok(KeepUnpullable::Auto),
                    "true" => Ok(KeepUnpullable::Always),
                    "false" => Ok(KeepUnpullable::Never),
                    _ => Err(E::custom(format!(
                        "keep_unpullable {v:?} is not one of auto, true or false"
                    ))),
                }
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<KeepUnpullable, E> {
                Err(E::custom(format!(
                    "keep_unpullable {v} is not one of auto, true or false"
                )))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<KeepUnpullable, E> {
                Err(E::custom(format!(
                    "keep_unpullable {v} is not one of auto, true or false"
                )))
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<KeepUnpullable, E> {
                Err(E::custom(format!(
                    "keep_unpullable {v} is not one of auto, true or false"
                )))
            }
        }
        de.deserialize_any(Either)
    }
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

    #[must_use]
    pub fn minutes(m: i64) -> Self {
        Self(chrono::Duration::minutes(m))
    }

    #[must_use]
    pub fn seconds(s: i64) -> Self {
        Self(chrono::Duration::seconds(s))
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
        let bad = || duration_fault(text);
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
                .ok_or_else(|| {
                    format!("{s} is too long for a duration (keep it under 100 years)")
                })?;
        }
        if !digits.is_empty() || s.is_empty() {
            return Err(bad());
        }
        Ok(Self(chrono::Duration::seconds(total)))
    }
}

/// Why `text` is not a duration, with the one it likely means where that
/// can be told: `10 is not a duration (use 10s, 10m, 10h)`, `1.5h …
/// (use 1h30m)`, `"1h 30m" … (use 1h30m)`.
fn duration_fault(text: &str) -> String {
    let s = text.trim();
    let shown = if s.is_empty() || s.contains(char::is_whitespace) || s != text {
        format!("{text:?}")
    } else {
        s.to_owned()
    };
    let forms = "write a number with a unit: 90m, 1h30m, 7d, 45s, or 0";
    let hint = if s.is_empty() {
        forms.to_owned()
    } else if s.bytes().all(|b| b.is_ascii_digit()) {
        format!("use {s}s, {s}m, {s}h")
    } else if let Some(positive) = s.strip_prefix('-').filter(|p| p.parse::<Age>().is_ok()) {
        format!("a duration is never negative: use {positive}, or 0")
    } else if let Some(meant) = lenient_duration(s) {
        format!("use {meant}")
    } else if let Some(unit) = s
        .split(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
        .find(|u| !u.is_empty() && !matches!(*u, "s" | "m" | "h" | "d" | "w"))
        .filter(|_| s.starts_with(|c: char| c.is_ascii_digit()))
    {
        format!("{unit} is not a unit: use s, m, h, d or w, as in 1h30m")
    } else {
        forms.to_owned()
    };
    format!("{shown} is not a duration ({hint})")
}

/// The duration `text` means when read leniently (spaces, fractions,
/// unit words: `1h 30m`, `1.5h`, `10 minutes`), written as a duration is;
/// `None` when it means none, or none in whole seconds.
fn lenient_duration(text: &str) -> Option<String> {
    let mut rest = text.trim();
    let mut groups = Vec::new();
    let mut seconds = 0.0_f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number = &rest[..number_end];
        let value: f64 = number.parse().ok()?;
        rest = rest[number_end..].trim_start();
        let unit_end = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let (letter, size) = match rest[..unit_end].to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" | "second" | "seconds" => ('s', 1.0),
            "m" | "min" | "mins" | "minute" | "minutes" => ('m', 60.0),
            "h" | "hr" | "hrs" | "hour" | "hours" => ('h', 3600.0),
            "d" | "day" | "days" => ('d', 86_400.0),
            "w" | "wk" | "wks" | "week" | "weeks" => ('w', 604_800.0),
            _ => return None,
        };
        rest = rest[unit_end..].trim_start_matches([' ', '\t', ',']);
        rest = rest.strip_prefix("and ").unwrap_or(rest);
        groups.push(format!("{number}{letter}"));
        seconds += value * size;
    }
    if groups.is_empty() || !seconds.is_finite() || seconds > 100.0 * 365.0 * 86_400.0 {
        return None;
    }
    let written = groups.concat();
    // Whole numbers with units: a duration as written, unless too long.
    if !written.contains('.') {
        return written.parse::<Age>().is_ok().then_some(written);
    }
    // A fraction: the same span in whole units.
    let whole = seconds.round();
    #[expect(
        clippy::cast_possible_truncation,
        reason = "finite, and at most 100 years of seconds"
    )]
    ((whole - seconds).abs() < 1e-6 && whole >= 1.0).then(|| Age::seconds(whole as i64).to_string())
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

    /// The line, checked field by field (`crontab.rs`), so that an error
    /// says which field is wrong and what it takes, quoting the line:
    /// `"61 * * * *": minute 61 is out of range (0-59)`.
    fn from_str(text: &str) -> Result<Self, String> {
        let quoted = |fault: String| format!("{text:?}: {fault}");
        check_crontab_characters(text).map_err(quoted)?;
        let fields: Vec<&str> = text.split_ascii_whitespace().collect();
        super::crontab::check_fields(&fields).map_err(quoted)?;
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(text)
            .map_err(|e| quoted(format!("croner cannot read it: {e}")))?;
        // `0 5 30 2 *` parses, and names no time ever: the daemon would have
        // nothing to wait for. croner searches up to the year 5000.
        if cron
            .find_next_occurrence(&chrono::Utc::now(), false)
            .is_err()
        {
            return Err(quoted(
                super::crontab::never_fires(&fields, &cron).unwrap_or_else(|| {
                    "it never fires: no date has its day of month, month and day of week".into()
                }),
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
        "is not a plain space (separate the fields with spaces)"
    } else {
        "is not plain ASCII (write the line as in a crontab, e.g. \"0 5 * * 4\")"
    };
    Err(format!("U+{:04X} {what}", u32::from(c)))
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

/// `safety.pace.workloads_cgroup`: whose stall the budget reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WorkloadsCgroup {
    /// kubelet's pods' cgroup (`kubepods.slice`, `kubepods`) under the
    /// cgroup v2 mount; where there is none, the run is not paced.
    #[default]
    Auto,
    /// The node's `/proc/pressure/io`: it also counts the engines' own
    /// stall on the removals, so a run goes slower.
    Node,
    /// A cgroup directory (absolute); unreadable, a run removes nothing.
    Path(PathBuf),
}

impl fmt::Display for WorkloadsCgroup {
    /// As the policy writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Node => f.write_str("node"),
            Self::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

impl serde::Serialize for WorkloadsCgroup {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
