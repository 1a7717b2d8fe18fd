//! What to write instead, added to the errors serde words itself: the
//! close name for an unknown key or value (``unknown field `keep_recnet`,
//! expected one of … (did you mean `keep_recent`?)``), and the plain words
//! for a value of the wrong type (`maybe is not a boolean (write true or
//! false)` for serde's `invalid type: string "maybe", expected a boolean`).
//!
//! serde builds those messages before any code of ours sees them, through
//! the YAML reader's `Error::custom`; they are rewritten here, once, from
//! the text serde documents. A message this does not recognise passes as
//! it is.

/// `message` (a YAML error without its place: `images: unknown field …`)
/// with the hint added, or in plain words.
pub(super) fn explain(message: &str) -> String {
    let Some((path, fault)) = split_path(message) else {
        return message.to_owned();
    };
    let fault = if let Some(rest) = fault.strip_prefix("unknown field `") {
        unknown(fault, rest)
    } else if let Some(rest) = fault.strip_prefix("unknown variant `") {
        unknown(fault, rest)
    } else if let Some(rest) = fault.strip_prefix("invalid type: ") {
        wrong_type(rest).unwrap_or_else(|| fault.to_owned())
    } else {
        return message.to_owned();
    };
    format!("{path}{fault}")
}

/// The YAML reader's path prefix (`images.keep: `, or none at the top)
/// and the fault after it, when the fault is one of serde's.
fn split_path(message: &str) -> Option<(&str, &str)> {
    const FAULTS: [&str; 3] = ["unknown field `", "unknown variant `", "invalid type: "];
    let at = FAULTS
        .iter()
        .filter_map(|f| {
            message
                .match_indices(f)
                .map(|(i, _)| i)
                .find(|&i| i == 0 || message[..i].ends_with(": "))
        })
        .min()?;
    Some(message.split_at(at))
}

/// ``unknown field `X`, expected one of `a`, `b` `` with the closest
/// expected name, if one is close. `rest` follows the opening backtick.
fn unknown(fault: &str, rest: &str) -> String {
    let Some((written, expected)) = rest.split_once("`, expected ") else {
        return fault.to_owned();
    };
    let candidates = expected.split('`').skip(1).step_by(2);
    match closest(written, candidates) {
        Some(name) => format!("{fault} (did you mean `{name}`?)"),
        None => fault.to_owned(),
    }
}

/// The candidate closest to `written`, when it is close enough to be a
/// slip: at most two edits (a swap of two neighbours is one), and fewer
/// than half the name's length, case ignored.
fn closest<'a>(written: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let written = written.to_lowercase();
    candidates
        .map(|c| (edit_distance(&written, &c.to_lowercase()), c))
        .filter(|(d, c)| *d <= 2 && *d * 2 < c.chars().count())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal string alignment distance (Damerau-Levenshtein where no
/// substring is edited twice): insertions, deletions, substitutions and
/// swaps of two neighbouring characters each count one.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows: two back (for a swap), the last one, this one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        std::mem::swap(&mut before, &mut last);
        std::mem::swap(&mut last, &mut row);
    }
    last[b.len()]
}

/// serde's `invalid type: UNEXPECTED, expected WHAT` in plain words, for
/// the types whose derived visitors say it (a bool, a list, a section).
fn wrong_type(rest: &str) -> Option<String> {
    let (unexpected, expected) = rest.rsplit_once(", expected ")?;
    let value = written(unexpected)?;
    Some(match expected {
        "a boolean" => {
            let hint = match value.to_ascii_lowercase().as_str() {
                "yes" | "y" | "on" | "\"true\"" => "write true",
                "no" | "n" | "off" | "\"false\"" => "write false",
                _ => "write true or false",
            };
            format!("{value} is not a boolean ({hint})")
        }
        "a sequence" if matches!(unexpected, "sequence" | "map") => {
            format!("{value} is not a list (write one `- entry` per line below the key)")
        }
        "a sequence" => format!(
            "{value} is not a list (write [{value}], or `- {value}` on the line below the key)"
        ),
        e if e.starts_with("struct ") || e == "a map" => format!(
            "{value} is not a mapping of keys (write its keys below it, indented, or {{}} for \
             its defaults)"
        ),
        "a whole number" | "a number" => format!("{value} is not {expected}"),
        _ => return None,
    })
}

/// A value as serde's `Unexpected` names it, as the file wrote it:
/// ``integer `5` `` is 5, `string "x"` is x, `sequence` a list.
fn written(unexpected: &str) -> Option<String> {
    for kind in ["boolean `", "integer `", "floating point `"] {
        if let Some(v) = unexpected.strip_prefix(kind) {
            return Some(v.trim_end_matches('`').to_owned());
        }
    }
    if let Some(quoted) = unexpected.strip_prefix("string ") {
        let plain = quoted.trim_matches('"');
        let simple = !plain.is_empty()
            && !plain.contains(|c: char| c.is_whitespace() || c == '\\' || c == '"');
        return Some(if simple {
            plain.to_owned()
        } else {
            quoted.to_owned()
        });
    }
    match unexpected {
        "sequence" => Some("a list".to_owned()),
        "map" => Some("a mapping".to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_are_counted_with_swaps_as_one() {
        for (a, b, d) in [
            ("keep_recnet", "keep_recent", 1),
            ("kep", "keep", 1),
            ("dokcer", "docker", 1),
            ("shedule", "schedule", 1),
            ("abc", "abc", 0),
            ("", "abc", 3),
            ("ca", "abc", 3),
            ("kitten", "sitting", 3),
        ] {
            assert_eq!(edit_distance(a, b), d, "{a} {b}");
            assert_eq!(edit_distance(b, a), d, "{b} {a}");
        }
    }

    #[test]
    fn only_a_close_name_is_suggested() {
        let names = ["auto", "docker", "containerd", "cri"];
        assert_eq!(closest("dokcer", names.into_iter()), Some("docker"));
        assert_eq!(closest("containrd", names.into_iter()), Some("containerd"));
        assert_eq!(closest("crio", names.into_iter()), Some("cri"));
        assert_eq!(closest("podman", names.into_iter()), None);
        assert_eq!(closest("x", names.into_iter()), None);
        assert_eq!(closest("utc", ["UTC", "local"].into_iter()), Some("UTC"));
    }

    #[test]
    fn messages_serde_does_not_word_pass_as_they_are() {
        for m in [
            "images: disk watermarks high_percent 70 …",
            "invalid type: something else, expected u64",
            "unknown anchor",
        ] {
            assert_eq!(explain(m), m);
        }
    }
}
