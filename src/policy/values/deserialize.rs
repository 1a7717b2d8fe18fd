//! The deserialize helpers behind the policy's values and the schema's
//! numbers, paths and endpoints: each checks a scalar inside the
//! deserializer, so that every error carries the line and column of the
//! value itself.

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::str::FromStr;

use serde::de::Visitor;
use serde::{Deserialize, Deserializer};

use super::WorkloadsCgroup;

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
pub(super) struct Parsed<T>(pub(super) PhantomData<T>);

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
pub(in crate::policy) fn texts<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
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
/// the error carries the line and column of the value itself; what is not
/// a whole number is refused saying what it is, with `example` (`1000`)
/// or the number it likely means.
pub(super) struct Integer<F> {
    pub(super) check: F,
    pub(super) example: &'static str,
}

impl<T, F: FnOnce(u64) -> Result<T, String>> Visitor<'_> for Integer<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<T, E> {
        (self.check)(v).map_err(E::custom)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<T, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!(
                "{v} is negative (write e.g. {})",
                self.example
            ))),
        }
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<T, E> {
        Err(E::custom(format!(
            "{v} is too large (write e.g. {})",
            self.example
        )))
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<T, E> {
        Err(E::custom(format!(
            "{v} is out of range (write e.g. {})",
            self.example
        )))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<T, E> {
        Err(E::custom(format!(
            "{v:?} is not a whole number ({})",
            whole_hint(v, self.example)
        )))
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<T, E> {
        Err(E::custom(format!(
            "{v} is not a number (write e.g. {})",
            self.example
        )))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        Err(E::custom(number_text_fault(
            v,
            "a whole number",
            self.example,
        )))
    }
}

/// The whole number a fraction likely means.
fn whole_hint(v: f64, example: &str) -> String {
    if !v.is_finite() || !(0.0..=1e15).contains(&v) {
        format!("write e.g. {example}")
    } else if v.fract() == 0.0 {
        format!("write {v:.0}")
    } else {
        format!("use {:.0} or {:.0}", v.floor(), v.ceil())
    }
}

/// Why the text `v` is not `what` (a number): a number in quotes, a
/// percent sign, or a word.
fn number_text_fault(v: &str, what: &str, example: &str) -> String {
    let shown = if v.is_empty() || v.contains(char::is_whitespace) {
        format!("{v:?}")
    } else {
        v.to_owned()
    };
    if v.trim().parse::<f64>().is_ok() {
        return format!(
            "{v:?} is text, not {what} (write {} without quotes)",
            v.trim()
        );
    }
    let hint = if let Some(n) = v
        .trim()
        .strip_suffix('%')
        .map(str::trim_end)
        .filter(|n| n.parse::<f64>().is_ok())
    {
        format!("write {n}, without %")
    } else {
        format!("write e.g. {example}")
    };
    format!("{shown} is not {what} ({hint})")
}

/// Reads a number, whole or not, inside the deserializer (see [`Integer`]).
struct Real {
    example: &'static str,
}

impl Visitor<'_> for Real {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }

    #[expect(clippy::cast_precision_loss, reason = "a percent, far under 2^52")]
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }

    #[expect(clippy::cast_precision_loss, reason = "a percent, far under 2^52")]
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<f64, E> {
        Err(E::custom(format!(
            "{v} is not a number (write e.g. {})",
            self.example
        )))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<f64, E> {
        Err(E::custom(number_text_fault(v, "a number", self.example)))
    }
}

/// `safety.max_deletions`: a whole number.
pub(in crate::policy) fn max_deletions<'de, D: Deserializer<'de>>(de: D) -> Result<u64, D::Error> {
    de.deserialize_any(Integer {
        check: Ok,
        example: "1000",
    })
}

/// `images.keep_recent`: a whole number, 0 for none.
pub(in crate::policy) fn keep_recent<'de, D: Deserializer<'de>>(de: D) -> Result<u32, D::Error> {
    de.deserialize_any(Integer {
        check: |v| u32::try_from(v).map_err(|_| format!("{v} is too large (write e.g. 2)")),
        example: "2, or 0 for none",
    })
}

/// `images.disk.high_percent` and `low_percent`: a whole percent, checked
/// against each other by the caller.
pub(in crate::policy) fn whole_percent<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<u64>, D::Error> {
    de.deserialize_any(Integer {
        check: Ok,
        example: "85",
    })
    .map(Some)
}

/// `safety.pace.io_pressure_percent`: a percent, checked by the caller.
pub(in crate::policy) fn percent<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<f64>, D::Error> {
    de.deserialize_any(Real { example: "10" }).map(Some)
}

/// `safety.pace.added_io_pressure_percent`: a small percent, checked by the
/// caller.
pub(in crate::policy) fn added_percent<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<f64>, D::Error> {
    de.deserialize_any(Real { example: "0.5" }).map(Some)
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
pub(in crate::policy) fn absolute_path<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<PathBuf, D::Error> {
    de.deserialize_str(Checked(|text: &str| path_fault(text).map_or(Ok(()), Err)))
        .map(PathBuf::from)
}

/// `safety.pace.workloads_cgroup`: `auto`, `node`, or an absolute path.
pub(in crate::policy) fn workloads_cgroup<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<WorkloadsCgroup>, D::Error> {
    let text = de.deserialize_str(Checked(|text: &str| match text {
        "auto" | "node" => Ok(()),
        _ => path_fault(text).map_or(Ok(()), |fault| {
            Err(format!("{fault}, or write auto or node"))
        }),
    }))?;
    Ok(Some(match text.as_str() {
        "auto" => WorkloadsCgroup::Auto,
        "node" => WorkloadsCgroup::Node,
        _ => WorkloadsCgroup::Path(PathBuf::from(text)),
    }))
}

/// `images.disk.from_kubelet`: the absolute path of kubelet's
/// configuration, or `true` for `default` (where kubeadm writes it).
/// `false` is refused: leaving the key out says it.
pub(in crate::policy) fn kubelet_config_path<'de, D: Deserializer<'de>>(
    de: D,
    default: &'static str,
) -> Result<PathBuf, D::Error> {
    struct PathOrTrue(&'static str);
    impl Visitor<'_> for PathOrTrue {
        type Value = PathBuf;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the absolute path of kubelet's configuration, or true")
        }

        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<PathBuf, E> {
            if v {
                Ok(PathBuf::from(self.0))
            } else {
                Err(E::custom(format!(
                    "from_kubelet: false says nothing: remove the key (and write high_percent \
                     and low_percent, or take their defaults), or write true for {}",
                    self.0
                )))
            }
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PathBuf, E> {
            Err(E::custom(format!(
                "{v} is not a path (write the absolute path of kubelet's configuration, or true \
                 for {})",
                self.0
            )))
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PathBuf, E> {
            Err(E::custom(format!(
                "{v} is not a path (write the absolute path of kubelet's configuration, or true \
                 for {})",
                self.0
            )))
        }

        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<PathBuf, E> {
            Err(E::custom(format!(
                "{v} is not a path (write the absolute path of kubelet's configuration, or true \
                 for {})",
                self.0
            )))
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PathBuf, E> {
            Checked(|text: &str| path_fault(text).map_or(Ok(()), Err))
                .visit_str(v)
                .map(PathBuf::from)
        }
    }
    de.deserialize_any(PathOrTrue(default))
}

/// A report path: an absolute path, or `""` for none.
pub(in crate::policy) fn report_path<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    de.deserialize_str(Checked(|text: &str| {
        if text.is_empty() {
            return Ok(());
        }
        path_fault(text).map_or(Ok(()), |e| Err(format!("{e} (or \"\" for none)")))
    }))
}

/// An engine endpoint: a unix socket, `unix:///path` or `/path`.
pub(in crate::policy) fn endpoint<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
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
