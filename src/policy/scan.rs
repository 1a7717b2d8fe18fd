//! A first pass over the policy's YAML, event by event, before serde reads
//! it: what serde would let through or could not bound.
//!
//! - one document only;
//! - nesting at most [`MAX_DEPTH`] deep, so that no parse runs long on
//!   deeply nested flow collections;
//! - at most [`MAX_NODES`] values, each alias counted with everything it
//!   stands for, so that aliases cannot expand a small file into gigabytes;
//! - only YAML's printable characters in the file: libyaml refuses the
//!   others naming a byte offset only;
//! - no key twice in one mapping;
//! - no YAML tag (`!!str 5`, `!Tag {…}`): serde would honour some and
//!   ignore others, so a tag would change what a value means, or nothing,
//!   without a word;
//! - no value left empty or null (`key:`, `key: ~`, `- null`), except at
//!   the paths the caller allows: an empty value drops a default silently
//!   (`labels:` with its entries commented out would drop the istio-init
//!   protection).
//!
//! The pass stops at the first fault, so a hostile file costs at most the
//! events up to it.

use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Span, Tag};

/// Deeper than any policy key (`runtime.docker.endpoint` is three).
pub const MAX_DEPTH: usize = 32;

/// Far more values than a policy has (the default has about 30).
pub const MAX_NODES: u64 = 10_000;

/// The longest value or key: longer than any path (`PATH_MAX` is 4096
/// bytes), glob or label rule a policy holds, short enough that an error
/// quoting it stays readable.
pub const MAX_SCALAR_CHARS: usize = 4096;

/// Entries in one list: far more keep patterns or label rules than a node
/// needs, and few enough that compiling them all stays quick and small.
pub const MAX_LIST_ENTRIES: usize = 256;

/// What is wrong, and where (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.message, self.line, self.column
        )
    }
}

fn fault(at: &Marker, message: String) -> Fault {
    Fault {
        line: at.line(),
        column: at.col() + 1,
        message,
    }
}

/// One open collection.
struct Frame {
    /// Where it is, as errors name it (`images.keep`, `images.keep[2]`).
    path: String,
    /// Its anchor, to record its size at its end (0: none).
    anchor: usize,
    /// Values in it so far, aliases expanded, itself included.
    size: u64,
    kind: FrameKind,
}

enum FrameKind {
    Sequence {
        next_index: usize,
    },
    Mapping {
        /// Keys seen, with where each was first written.
        keys: HashMap<String, Marker>,
        /// The key whose value comes next; `None` when a key comes next.
        key: Option<String>,
    },
}

/// Checks `text` (see the module). `nullable` lists the dotted paths whose
/// value may be null because docs/contracts.md says what null means there.
///
/// # Errors
/// The first fault found, with its line and column.
pub fn scan(text: &str, nullable: &[&str]) -> Result<(), Fault> {
    printable(text)?;
    let mut scanner = Scanner {
        nullable,
        stack: Vec::new(),
        anchors: HashMap::new(),
        nodes: 0,
        documents: 0,
    };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| {
            // The scanner reads ahead, so its own limit may come first.
            let message = if e.info().contains("recursion limit") {
                format!("nested more than {MAX_DEPTH} levels deep: no policy key is")
            } else {
                format!("not valid YAML: {}", e.info())
            };
            fault(e.marker(), message)
        })?;
        if scanner.event(event, span)? {
            break;
        }
    }
    Ok(())
}

struct Scanner<'a> {
    nullable: &'a [&'a str],
    stack: Vec<Frame>,
    /// The size of each anchored value, aliases expanded.
    anchors: HashMap<usize, u64>,
    /// Values in the document so far, aliases expanded.
    nodes: u64,
    documents: usize,
}

impl Scanner<'_> {
    /// Takes one event; `Ok(true)` at the end of the stream.
    fn event(&mut self, event: Event<'_>, span: Span) -> Result<bool, Fault> {
        let at = &span.start;
        match event {
            Event::StreamEnd => return Ok(true),
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(fault(
                        at,
                        "a second YAML document: a policy is one document; remove this `---` \
                         and what follows, or merge it into the first"
                            .to_owned(),
                    ));
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                self.scalar(&value, style, tag.as_deref(), at)?;
                self.finish(anchor, 1);
            }
            Event::Alias(anchor) => {
                let path = self.value_path(at, None)?;
                let size = self.anchors.get(&anchor).copied().unwrap_or(1);
                match path.as_deref() {
                    None => {
                        return Err(fault(
                            at,
                            "an alias as a key: keys must be plain words".into(),
                        ));
                    }
                    Some("") => return Err(not_a_mapping(at)),
                    Some(_) => {}
                }
                self.count(at, size)?;
                self.finish(0, size);
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                let mapping = matches!(event, Event::MappingStart(..));
                let Some(path) = self.value_path(at, None)? else {
                    return Err(fault(
                        at,
                        "a list or mapping as a key: keys must be plain words".into(),
                    ));
                };
                if path.is_empty() && !mapping {
                    return Err(not_a_mapping(at));
                }
                if let Some(tag) = tag {
                    return Err(tagged(at, tag, Some(&path)));
                }
                if self.stack.len() >= MAX_DEPTH {
                    return Err(fault(
                        at,
                        format!("nested more than {MAX_DEPTH} levels deep: no policy key is"),
                    ));
                }
                self.count(at, 1)?;
                let kind = if mapping {
                    FrameKind::Mapping {
                        keys: HashMap::new(),
                        key: None,
                    }
                } else {
                    FrameKind::Sequence { next_index: 0 }
                };
                self.stack.push(Frame {
                    path,
                    anchor,
                    size: 1,
                    kind,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(frame) = self.stack.pop() {
                    self.finish(frame.anchor, frame.size);
                }
            }
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => {}
        }
        Ok(false)
    }

    /// Takes one scalar, a key or a value.
    fn scalar(
        &mut self,
        value: &str,
        style: ScalarStyle,
        tag: Option<&Tag>,
        at: &Marker,
    ) -> Result<(), Fault> {
        let chars = value.chars().count();
        if chars > MAX_SCALAR_CHARS {
            return Err(fault(
                at,
                format!(
                    "a value of {chars} characters, more than {MAX_SCALAR_CHARS}: \
                     no policy key or value is that long"
                ),
            ));
        }
        let is_null = tag.map_or_else(
            || style == ScalarStyle::Plain && is_null_word(value),
            |t| t.is_yaml_core_schema() && t.suffix == "null",
        );
        let path = self.value_path(at, Some(value))?;
        if let Some(path) = &path {
            if path.is_empty() && !is_null {
                return Err(not_a_mapping(at));
            }
            self.check_null(is_null, path, at)?;
        }
        if let Some(tag) = tag {
            return Err(tagged(at, tag, path.as_deref()));
        }
        self.count(at, 1)
    }

    /// Where the value that starts here sits: its dotted path, or `None`
    /// when it is a mapping's key (`key` is its text when a scalar). A key
    /// is recorded, and refused when its mapping already has it.
    fn value_path(&mut self, at: &Marker, key: Option<&str>) -> Result<Option<String>, Fault> {
        let Some(frame) = self.stack.last_mut() else {
            return Ok(Some(String::new()));
        };
        match &mut frame.kind {
            FrameKind::Sequence { next_index } => {
                if *next_index >= MAX_LIST_ENTRIES {
                    return Err(fault(
                        at,
                        format!(
                            "{} has more than {MAX_LIST_ENTRIES} entries: a policy needs a few",
                            frame.path
                        ),
                    ));
                }
                let path = format!("{}[{next_index}]", frame.path);
                *next_index += 1;
                Ok(Some(path))
            }
            FrameKind::Mapping { keys, key: pending } => {
                if let Some(name) = pending.take() {
                    return Ok(Some(if frame.path.is_empty() {
                        name
                    } else {
                        format!("{}.{name}", frame.path)
                    }));
                }
                let Some(name) = key else {
                    // A complex key: the caller refuses it.
                    return Ok(None);
                };
                if let Some(first) = keys.get(name) {
                    let within = if frame.path.is_empty() {
                        String::new()
                    } else {
                        format!(" in {}", frame.path)
                    };
                    return Err(fault(
                        at,
                        format!(
                            "duplicate key `{name}`{within} (first at line {} column {}): \
                             write each key once",
                            first.line(),
                            first.col() + 1
                        ),
                    ));
                }
                keys.insert(name.to_owned(), *at);
                *pending = Some(name.to_owned());
                Ok(None)
            }
        }
    }

    fn check_null(&self, is_null: bool, path: &str, at: &Marker) -> Result<(), Fault> {
        // The whole document null or empty: no keys, all defaults.
        if !is_null || path.is_empty() || self.nullable.contains(&path) {
            return Ok(());
        }
        let what = if path.ends_with(']') {
            "is an empty or null list entry: remove the entry"
        } else {
            "has no value: write one (`[]` is an empty list), or remove the key to take its default"
        };
        Err(fault(at, format!("{path} {what}")))
    }

    /// Counts `size` more values, refusing past [`MAX_NODES`].
    fn count(&mut self, at: &Marker, size: u64) -> Result<(), Fault> {
        self.nodes = self.nodes.saturating_add(size);
        if self.nodes > MAX_NODES {
            return Err(fault(
                at,
                format!(
                    "more than {MAX_NODES} values (each alias counts all it stands for): \
                     a policy has a few dozen"
                ),
            ));
        }
        Ok(())
    }

    /// A value of `size` ended: it counts in its parent, and its anchor
    /// (if any) stands for `size` values.
    fn finish(&mut self, anchor: usize, size: u64) {
        if anchor != 0 {
            self.anchors.insert(anchor, size);
        }
        if let Some(parent) = self.stack.last_mut() {
            parent.size = parent.size.saturating_add(size);
        }
    }
}

fn not_a_mapping(at: &Marker) -> Fault {
    fault(
        at,
        "a policy is a mapping of keys (`version: 1`, `images:` …), not a single value or a list"
            .to_owned(),
    )
}

/// A tag on the value at `path` (`None`: on a key).
fn tagged(at: &Marker, tag: &Tag, path: Option<&str>) -> Fault {
    let on = match path {
        None => "a key",
        Some("") => "the document",
        Some(path) => path,
    };
    fault(
        at,
        format!(
            "YAML tag `{}` on {on}: tags are not supported; remove it (quote a value to make \
             it text)",
            written(tag)
        ),
    )
}

/// A tag near enough to how it was written to find it in the file: the
/// parser hands it over with its handle resolved.
fn written(tag: &Tag) -> String {
    match tag.handle.as_str() {
        "tag:yaml.org,2002:" => format!("!!{}", tag.suffix),
        "!" => format!("!{}", tag.suffix),
        // A verbatim tag, or the non-specific `!`, comes with no handle.
        "" if tag.suffix == "!" => "!".to_owned(),
        prefix => format!("!<{prefix}{}>", tag.suffix),
    }
}

/// Refuses a character YAML does not allow anywhere in a file, where it
/// is: libyaml would refuse it too, naming only a byte offset.
fn printable(text: &str) -> Result<(), Fault> {
    let (mut line, mut column) = (1, 1);
    for c in text.chars() {
        // YAML 1.2's c-printable, which libyaml enforces.
        let allowed = matches!(c,
            '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}'
            | '\u{e000}'..='\u{fffd}' | '\u{10000}'..);
        if !allowed {
            let what = if c.is_control() {
                "a control character"
            } else {
                "an unprintable character"
            };
            return Err(Fault {
                line,
                column,
                message: format!(
                    "{what} (U+{:04X}), which YAML does not allow in a file: remove it",
                    u32::from(c)
                ),
            });
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    Ok(())
}

/// The plain scalars YAML reads as null.
fn is_null_word(value: &str) -> bool {
    matches!(value, "" | "~" | "null" | "Null" | "NULL")
}

#[cfg(test)]
mod tests {
    use std::fmt::Write;

    use super::*;

    fn check(text: &str) -> Result<(), String> {
        scan(text, &["allowed.here"]).map_err(|f| f.to_string())
    }

    #[test]
    fn a_normal_policy_passes() {
        let default = crate::policy::DEFAULT_POLICY_YAML;
        scan(default, crate::policy::source::NULLABLE).unwrap();
        // Its `disk: null` is allowed only where the caller allows it.
        assert!(
            scan(default, &[])
                .unwrap_err()
                .message
                .starts_with("images.disk has no value")
        );
        check("").unwrap();
        check("# only a comment\n").unwrap();
        check("images:\n  keep: []\nprotect: {labels: [a=b]}\n").unwrap();
    }

    #[test]
    fn empty_and_null_values_are_refused_with_their_path() {
        for (text, path, line, column) in [
            ("protect:\n  labels:\n", "protect.labels has no value", 2, 9),
            (
                "protect:\n  labels:\n  # - a=b\n",
                "protect.labels has no value",
                2,
                9,
            ),
            (
                "protect:\n  labels: ~\n",
                "protect.labels has no value",
                2,
                11,
            ),
            ("runtime:\n", "runtime has no value", 1, 8),
            ("runtime: null\n", "runtime has no value", 1, 10),
            ("runtime: !!null x\n", "runtime has no value", 1, 10),
            (
                "images:\n  keep:\n    - \n",
                "images.keep[0] is an empty",
                3,
                7,
            ),
            (
                "images: {keep: [a, ~]}\n",
                "images.keep[1] is an empty",
                1,
                20,
            ),
        ] {
            let e = check(text).expect_err(text);
            assert!(e.starts_with(path), "{text:?}: {e}");
            assert!(
                e.ends_with(&format!("at line {line} column {column}")),
                "{text:?}: {e}"
            );
        }
        // A quoted empty string is a value; a documented null is allowed.
        check("report:\n  json_path: \"\"\n").unwrap();
        check("allowed:\n  here: ~\n").unwrap();
    }

    #[test]
    fn a_duplicate_key_names_both_places() {
        let e = check("images:\n  keep: [a]\nimages:\n  keep: [b]\n").unwrap_err();
        assert_eq!(
            e,
            "duplicate key `images` (first at line 1 column 1): write each key once at line 3 column 1"
        );
        let e = check("images: {keep: [a], keep: [b]}\n").unwrap_err();
        assert!(e.starts_with("duplicate key `keep` in images"), "{e}");
        // The same key in two mappings is fine.
        check("containers: {enabled: true}\nimages: {enabled: true}\n").unwrap();
    }

    #[test]
    fn a_second_document_is_refused_where_it_starts() {
        let e = check("version: 1\n---\nversion: 1\n").unwrap_err();
        assert!(e.starts_with("a second YAML document"), "{e}");
        assert!(e.ends_with("at line 2 column 1"), "{e}");
        check("---\nversion: 1\n...\n").unwrap();
    }

    #[test]
    fn nesting_is_bounded() {
        // The top mapping is the first level.
        let nested = |n: usize| format!("a: {}{}", "[".repeat(n), "]".repeat(n));
        let e = check(&nested(MAX_DEPTH)).unwrap_err();
        assert!(e.starts_with("nested more than 32 levels deep"), "{e}");
        check(&nested(MAX_DEPTH - 1)).unwrap();
    }

    #[test]
    fn aliases_count_everything_they_stand_for() {
        // Ten levels of ten aliases each: 10^10 values once expanded.
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..10 {
            let prev = level - 1;
            let refs = vec![format!("*a{prev}"); 10].join(", ");
            writeln!(text, "a{level}: &a{level} [{refs}]").unwrap();
        }
        let e = check(&text).unwrap_err();
        assert!(e.starts_with("more than 10000 values"), "{e}");
        // A few aliases are fine.
        check("a: &x [p, q]\nb: *x\nc: *x\n").unwrap();
    }

    #[test]
    fn lists_are_bounded() {
        let list = |n: usize| format!("images:\n  keep:\n{}", "    - a\n".repeat(n));
        check(&list(MAX_LIST_ENTRIES)).unwrap();
        let e = check(&list(MAX_LIST_ENTRIES + 1)).unwrap_err();
        assert_eq!(
            e,
            "images.keep has more than 256 entries: a policy needs a few at line 259 column 7"
        );
    }

    #[test]
    fn values_and_keys_are_bounded() {
        let long = "x".repeat(MAX_SCALAR_CHARS + 1);
        for text in [
            format!("images:\n  keep: [{long}]\n"),
            format!("{long}: 1\n"),
        ] {
            let e = check(&text).unwrap_err();
            assert!(e.starts_with("a value of 4097 characters"), "{e}");
        }
        check(&format!(
            "images:\n  keep: [{}]\n",
            "x".repeat(MAX_SCALAR_CHARS)
        ))
        .unwrap();
    }

    #[test]
    fn the_document_is_a_mapping_or_empty() {
        for text in ["- version: 1\n", "safeprune\n", "&a x\n"] {
            let e = check(text).unwrap_err();
            assert!(
                e.starts_with("a policy is a mapping of keys"),
                "{text:?}: {e}"
            );
            assert!(e.ends_with("at line 1 column 1"), "{text:?}: {e}");
        }
        check("~\n").unwrap();
    }

    #[test]
    fn complex_keys_are_refused() {
        assert!(check("? [a]\n: b\n").unwrap_err().contains("as a key"));
        assert!(check("a: &k x\n*k : y\n").unwrap_err().contains("as a key"));
    }

    #[test]
    fn tags_are_refused_where_they_are_written() {
        for (text, says, line, column) in [
            (
                "safety: {concurrency: !!str 5}\n",
                "YAML tag `!!str` on safety.concurrency: tags are not supported",
                1,
                23,
            ),
            ("images: !Tag {enabled: true}\n", "`!Tag` on images:", 1, 9),
            (
                "images:\n  keep: !!seq [a]\n",
                "`!!seq` on images.keep:",
                2,
                9,
            ),
            ("images: {keep: [! a]}\n", "`!` on images.keep[0]:", 1, 17),
            ("!!str version: 1\n", "`!!str` on a key:", 1, 1),
            ("--- !!map\nversion: 1\n", "`!!map` on the document:", 1, 5),
            ("version: !!int 1\n", "`!!int` on version:", 1, 10),
            (
                "a: !<tag:example.com,2000:x> b\n",
                "`!<tag:example.com,2000:x>` on a:",
                1,
                4,
            ),
            // A null tag where null is allowed is still a tag.
            (
                "allowed:\n  here: !!null x\n",
                "`!!null` on allowed.here:",
                2,
                9,
            ),
        ] {
            let e = check(text).expect_err(text);
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(
                e.ends_with(&format!("at line {line} column {column}")),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn unprintable_characters_are_refused_where_they_are() {
        for (text, what, line, column) in [
            (
                "images:\n  keep: [\"a\u{1}b\"]\n",
                "a control character (U+0001)",
                2,
                12,
            ),
            ("\u{1}bogus: 1\n", "a control character (U+0001)", 1, 1),
            ("a: 'x\u{7f}'\n", "a control character (U+007F)", 1, 6),
            ("a: x\u{80}\n", "a control character (U+0080)", 1, 5),
            ("a: x\u{fffe}\n", "an unprintable character (U+FFFE)", 1, 5),
        ] {
            let e = check(text).expect_err(text);
            assert_eq!(
                e,
                format!(
                    "{what}, which YAML does not allow in a file: remove it at line {line} \
                     column {column}"
                )
            );
        }
        // What YAML allows: tabs in values, CRLF, NEL, NBSP, any language.
        check("a: \"x\ty\"\r\nb: c\u{85}d\nc: \u{a0}é😀\n").unwrap();
    }

    #[test]
    fn broken_yaml_is_a_fault_with_a_place() {
        let e = check("a: [b\n").unwrap_err();
        assert!(e.starts_with("not valid YAML:"), "{e}");
        assert!(e.contains(" at line "), "{e}");
    }
}
