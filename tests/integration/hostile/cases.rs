//! The corpus of hostile policies, shared by
//! `tests/integration/hostile_policies.rs`, which checks what each one gets, and
//! `benches/speed/hostile_policies.rs`, which times each one.
//!
//! Small cases are files next to this one, byte for byte as written; large
//! ones are made at run time in a scratch directory.

use std::fs;
use std::path::{Path, PathBuf};

/// One bad policy: where it is, and what the refusal must say.
pub struct Case {
    pub name: String,
    pub path: PathBuf,
    /// A piece of the message.
    pub says: &'static str,
    /// The line and column the message must name, where the fault has one.
    #[allow(
        dead_code,
        reason = "the bench times the cases, it does not read their messages"
    )]
    pub at: Option<(usize, usize)>,
}

/// A file of this directory, what its refusal says, and where.
type File = (&'static str, &'static str, Option<(usize, usize)>);

const FILES: &[File] = &[
    ("alias-bomb.yaml", "more than 10000 values", Some((4, 45))),
    (
        "audit-tilde.yaml",
        "report.audit_log: path '~/audit.jsonl' starts with '~'",
        Some((2, 14)),
    ),
    (
        "bad-duration.yaml",
        "images.min_age: 1.5h is not a duration (use 1h30m)",
        Some((2, 12)),
    ),
    ("bad-glob.yaml", "invalid glob 'app['", Some((2, 10))),
    (
        "bad-label-rule.yaml",
        "invalid label rule ' key=x'",
        Some((2, 12)),
    ),
    (
        "bom-then-two-documents.yaml",
        "a second YAML document",
        Some((2, 1)),
    ),
    (
        "complex-key.yaml",
        "a list or mapping as a key",
        Some((1, 3)),
    ),
    (
        "concurrency-0.yaml",
        "concurrency 0 is out of range: use 1 to 64",
        Some((2, 16)),
    ),
    (
        "concurrency-100.yaml",
        "concurrency 100 is out of range",
        Some((2, 16)),
    ),
    (
        "concurrency-huge.yaml",
        "safety.concurrency: concurrency 99999999999999999999999 is out of range",
        Some((2, 16)),
    ),
    (
        "control-escaped.yaml",
        "images.keep[1]: the value holds a control character (U+0001): remove it",
        Some((2, 37)),
    ),
    (
        "control-raw.yaml",
        "a control character (U+0001), which YAML does not allow in a file: remove it",
        Some((2, 17)),
    ),
    (
        "duplicate-key.yaml",
        "duplicate key `images` (first at line 1 column 1)",
        Some((3, 1)),
    ),
    (
        "duplicate-nested-key.yaml",
        "duplicate key `min_age` in images",
        Some((3, 3)),
    ),
    ("empty-glob.yaml", "empty pattern", Some((2, 10))),
    (
        "endpoint-empty.yaml",
        "endpoint \"\" is not a unix socket",
        Some((3, 15)),
    ),
    ("endpoint-http.yaml", "is not a unix socket", Some((3, 15))),
    ("endpoint-nul.yaml", "is not a unix socket", Some((3, 15))),
    (
        "endpoint-relative.yaml",
        "is not a unix socket",
        Some((3, 15)),
    ),
    (
        "endpoint-tcp.yaml",
        "endpoint \"tcp://10.0.0.1:2375\" is not a unix socket",
        Some((3, 15)),
    ),
    (
        "endpoint-unix-empty.yaml",
        "endpoint \"unix://\" is not a unix socket",
        Some((3, 15)),
    ),
    (
        "keep-null-entry.yaml",
        "images.keep[1] is an empty or null list entry",
        Some((4, 6)),
    ),
    (
        "key-too-long.yaml",
        "a value of 5000 characters",
        Some((2, 3)),
    ),
    (
        "keep-number.yaml",
        "images.keep[0]: expected a string, and YAML reads this unquoted value as the number 5",
        Some((2, 10)),
    ),
    ("kind-null.yaml", "runtime.kind has no value", Some((2, 9))),
    (
        "labels-bool.yaml",
        "protect.labels[0]: expected a string, and YAML reads this unquoted value as the \
         boolean true: quote it if it is meant as text",
        Some((2, 12)),
    ),
    (
        "labels-commented-out.yaml",
        "protect.labels has no value",
        Some((2, 9)),
    ),
    (
        "labels-empty.yaml",
        "protect.labels has no value",
        Some((2, 9)),
    ),
    (
        "labels-tilde.yaml",
        "protect.labels has no value",
        Some((2, 11)),
    ),
    ("listen-hostname.yaml", "is not IP:port", Some((2, 11))),
    (
        "lock-file-bool.yaml",
        "path 'true' is not absolute",
        Some((1, 12)),
    ),
    (
        "lock-file-number.yaml",
        "path '42' is not absolute",
        Some((1, 12)),
    ),
    (
        "lock-file-relative.yaml",
        "path 'safeprune.lock' is not absolute",
        Some((1, 12)),
    ),
    ("lock-file-tilde.yaml", "does not expand", Some((1, 12))),
    (
        "max-deletions-negative.yaml",
        "safety.max_deletions: -5 is negative (write e.g. 1000)",
        Some((2, 18)),
    ),
    (
        "never-fires-april-31.yaml",
        "schedule: \"0 5 31 4 *\": day-of-month 31 never occurs in April",
        Some((1, 11)),
    ),
    (
        "never-fires.yaml",
        "schedule: \"0 5 30 2 *\": day-of-month 30 never occurs in February",
        Some((1, 11)),
    ),
    ("not-utf8.yaml", "byte 0xe9 is not UTF-8", Some((3, 14))),
    (
        "schedule-minute-61.yaml",
        "schedule: \"61 5 * * 4\": minute 61 is out of range (0-59)",
        Some((2, 11)),
    ),
    (
        "duration-bare-number.yaml",
        "containers.min_age: 10 is not a duration (use 10s, 10m, 10h)",
        Some((2, 12)),
    ),
    (
        "max-deletions-text.yaml",
        "safety.max_deletions: 10s is not a whole number (write e.g. 1000)",
        Some((2, 18)),
    ),
    (
        "kind-typo.yaml",
        "runtime.kind: unknown variant `dokcer`, expected one of `auto`, `docker`, \
         `containerd`, `cri` (did you mean `docker`?)",
        Some((2, 9)),
    ),
    (
        "report-relative.yaml",
        "report.json_path: path 'reports/last.json' is not absolute",
        Some((2, 14)),
    ),
    ("runtime-empty.yaml", "runtime has no value", Some((1, 8))),
    (
        "schedule-em-space.yaml",
        "schedule: \"0 5\\u{2003}* * 4\": U+2003 is not a plain space",
        Some((2, 11)),
    ),
    (
        "schedule-garbage.yaml",
        "schedule: \"every thursday\": write 5 fields (minute hour day-of-month month \
         day-of-week), or 6 with seconds first; got 2",
        Some((1, 11)),
    ),
    (
        "schedule-nbsp.yaml",
        "schedule: \"0\\u{a0}5 * * 4\": U+00A0 is not a plain space",
        Some((1, 11)),
    ),
    (
        "schedule-trailing-comma.yaml",
        "schedule: \"1, 5 * * *\": minute 1, has an empty list entry",
        Some((1, 11)),
    ),
    ("tab-indent.yaml", "not valid YAML", Some((2, 2))),
    (
        "tag-str.yaml",
        "YAML tag `!!str` on safety.concurrency: tags are not supported",
        Some((2, 16)),
    ),
    (
        "tag-unknown.yaml",
        "YAML tag `!Tag` on images: tags are not supported",
        Some((1, 9)),
    ),
    (
        "textfile-number.yaml",
        "path '7' is not absolute",
        Some((2, 21)),
    ),
    (
        "timezone-unknown.yaml",
        "unknown variant `Europe/Paris`",
        Some((1, 11)),
    ),
    (
        "top-level-list.yaml",
        "a policy is a mapping of keys",
        Some((1, 1)),
    ),
    (
        "top-level-scalar.yaml",
        "a policy is a mapping of keys",
        Some((1, 1)),
    ),
    ("two-documents.yaml", "a second YAML document", Some((2, 1))),
    ("unclosed-flow.yaml", "not valid YAML", Some((2, 1))),
    ("unknown-alias.yaml", "unknown anchor", Some((2, 9))),
    (
        "unknown-key.yaml",
        "unknown field `kep`, expected one of `enabled`, `mode`, `min_age`, `keep`, \
         `keep_recent`, `disk`, `keep_unpullable` (did you mean `keep`?)",
        Some((2, 3)),
    ),
    (
        "unknown-key-first-line.yaml",
        "unknown field `bogus`",
        Some((1, 1)),
    ),
    (
        "pod-sandboxes-false.yaml",
        "pod_sandboxes: false is not supported: pod sandboxes belong to kubelet",
        Some((2, 3)),
    ),
    (
        "version-2.yaml",
        "unsupported policy version 2",
        Some((1, 10)),
    ),
    (
        "version-negative.yaml",
        "version: -1 is negative",
        Some((1, 10)),
    ),
    (
        "wrong-type.yaml",
        "containers.enabled: maybe is not a boolean (write true or false)",
        Some((2, 12)),
    ),
];

/// Every case: the files, and the large or special ones made in `scratch`.
///
/// # Panics
/// When `scratch` cannot be written.
#[must_use]
pub fn cases(scratch: &Path) -> Vec<Case> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration/hostile");
    let mut all: Vec<Case> = FILES
        .iter()
        .map(|&(file, says, at)| Case {
            name: file.to_owned(),
            path: here.join(file),
            says,
            at,
        })
        .collect();
    generated(scratch, &mut all);
    special(scratch, &mut all);
    all
}

/// The large cases, written to `scratch`.
fn generated(scratch: &Path, all: &mut Vec<Case>) {
    let mut made = |name: &str, text: &[u8], says, at| {
        let path = scratch.join(name);
        fs::write(&path, text).unwrap();
        all.push(Case {
            name: name.to_owned(),
            path,
            says,
            at,
        });
    };
    // 160 KB of nested flow sequences: quadratic in the YAML scanner.
    let deep = format!(
        "images: {{keep: {}{}}}\n",
        "[".repeat(80_000),
        "]".repeat(80_000)
    );
    made(
        "nested-160k.yaml",
        deep.as_bytes(),
        "nested more than 32 levels deep",
        Some((1, 270)),
    );
    // 250,000 list entries in 500 KB.
    let many = format!("images: {{keep: [{}]}}\n", vec!["a"; 250_000].join(","));
    made(
        "entries-250k.yaml",
        many.as_bytes(),
        "images.keep has more than 256 entries",
        Some((1, 529)),
    );
    // A 200,000-character glob.
    let long = format!("images:\n  keep: [\"{}\"]\n", "a*".repeat(100_000));
    made(
        "glob-200k.yaml",
        long.as_bytes(),
        "a value of 200000 characters",
        Some((2, 10)),
    );
    // A glob just over the pattern limit, inside the value limit.
    let glob = format!("images:\n  keep: [\"{}x\"]\n", "a*".repeat(512));
    made(
        "glob-1025.yaml",
        glob.as_bytes(),
        "is 1025 characters long, more than 1024",
        Some((2, 10)),
    );
    let rule = format!("protect:\n  labels: [\"k={}\"]\n", "[a-z]".repeat(205));
    made(
        "label-rule-1027.yaml",
        rule.as_bytes(),
        "is 1027 characters long",
        Some((2, 12)),
    );
    // One byte over 1 MiB, of comments.
    let big = vec![b'#'; (1 << 20) + 1];
    made("over-1mib.yaml", &big, "the file is 1048577 bytes", None);
    // 50 MB, sparse: refused by its size, never read.
    let huge = scratch.join("50mb.yaml");
    fs::File::create(&huge).unwrap().set_len(50 << 20).unwrap();
    all.push(Case {
        name: "50mb.yaml".into(),
        path: huge,
        says: "the file is 52428800 bytes",
        at: None,
    });
}

/// What is not a regular file, and what does not exist.
fn special(scratch: &Path, all: &mut Vec<Case>) {
    let fifo = scratch.join("fifo.yaml");
    let made_fifo = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made_fifo.success());
    for (name, path, says) in [
        ("fifo", fifo, "it is a FIFO, not a regular file"),
        (
            "/dev/zero",
            PathBuf::from("/dev/zero"),
            "it is a character device",
        ),
        (
            "/dev/urandom",
            PathBuf::from("/dev/urandom"),
            "it is a character device",
        ),
        ("directory", scratch.to_owned(), "it is a directory"),
        (
            "missing",
            scratch.join("missing.yaml"),
            "cannot read policy",
        ),
    ] {
        all.push(Case {
            name: name.to_owned(),
            path,
            says,
            at: None,
        });
    }
}
