//! The documentation is held to the repository and to the binary: every
//! relative link of README.md, CONTRIBUTING.md, BENCHMARKS.md,
//! RELIABILITY.md and docs/*.md names a file that exists and, with a
//! `#fragment`, a heading of it (GitHub's anchors); every `safeprune …`
//! command line in their code blocks names a real subcommand and only flags
//! its `--help` lists; and README.md stays the operator's short page.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The documents checked, relative to the repository's root.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = [
        "README.md",
        "CONTRIBUTING.md",
        "BENCHMARKS.md",
        "RELIABILITY.md",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let mut pages: Vec<PathBuf> = fs::read_dir("docs")
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fenced code block: its language (the word after the fence, may be
/// empty) and its lines, with the 1-based line number of each.
struct Block {
    lang: String,
    lines: Vec<(usize, String)>,
}

/// The text outside code blocks (line number, line), and the blocks.
fn split(text: &str) -> (Vec<(usize, &str)>, Vec<Block>) {
    let mut prose = Vec::new();
    let mut blocks = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        match (&mut open, fence) {
            (None, Some(f)) => {
                let lang = trimmed[f.len()..].trim().to_owned();
                open = Some((
                    f.to_owned(),
                    Block {
                        lang,
                        lines: Vec::new(),
                    },
                ));
            }
            (Some((f, _)), Some(g)) if f == g && trimmed.trim_end() == g => {
                blocks.push(open.take().unwrap().1);
            }
            (Some((_, block)), _) => block.lines.push((i + 1, line.to_owned())),
            (None, None) => prose.push((i + 1, line)),
        }
    }
    (prose, blocks)
}

/// GitHub's anchor for a heading: lower case, inline code's backticks and
/// every punctuation but `-` and `_` dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings, duplicates numbered as GitHub
/// numbers them (`name`, `name-1`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let (prose, _) = split(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut all = BTreeSet::new();
    for (_, line) in prose {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        all.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    all
}

/// The targets of a line's inline links `[text](target)`, outside inline
/// code.
fn link_targets(line: &str) -> Vec<String> {
    let mut outside = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            outside.push_str(part);
        } else {
            outside.push_str(&" ".repeat(part.len()));
        }
    }
    let mut targets = Vec::new();
    let mut rest = outside.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let target = rest[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.to_owned());
        rest = &rest[end..];
    }
    targets
}

/// What is wrong with every relative link of `docs`, one line each.
fn broken_links(docs: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    for doc in docs {
        let text = read(doc);
        let (prose, _) = split(&text);
        for (n, line) in prose {
            for target in link_targets(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, fragment) = match target.split_once('#') {
                    Some((p, f)) => (p, Some(f)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    doc.clone()
                } else {
                    doc.parent().unwrap_or(Path::new("")).join(path)
                };
                let at = format!("{}:{n}: ({target})", doc.display());
                if !file.exists() {
                    broken.push(format!("{at}: no file {}", file.display()));
                    continue;
                }
                let Some(fragment) = fragment else { continue };
                if file.extension().is_none_or(|e| e != "md") {
                    broken.push(format!("{at}: a fragment into a file that is not Markdown"));
                } else if !anchors(&read(&file)).contains(fragment) {
                    broken.push(format!(
                        "{at}: {} has no heading #{fragment}",
                        file.display()
                    ));
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_of_the_docs_resolves_to_a_file_and_a_heading() {
    let broken = broken_links(&documents());
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_heading() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("a.md");
    fs::write(dir.path().join("b.md"), "# B\n\n## Two words, `code`\n").unwrap();
    fs::write(
        &doc,
        "# A\n\n[ok](b.md#two-words-code) [self](#a) [web](https://x/#y)\n\
         [gone](c.md) [no heading](b.md#three) `[code](nowhere.md)`\n\
         ```\n[in a block](nowhere.md)\n```\n",
    )
    .unwrap();
    let broken = broken_links(&[doc]);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("(c.md): no file"), "{}", broken[0]);
    assert!(broken[1].contains("has no heading #three"), "{}", broken[1]);
}

#[test]
fn github_anchors_drop_punctuation_and_number_duplicates() {
    assert_eq!(
        slug("`docker system prune -a -f` and `safeprune run`, side by side"),
        "docker-system-prune--a--f-and-safeprune-run-side-by-side"
    );
    assert_eq!(
        slug("Act before kubelet's image GC"),
        "act-before-kubelets-image-gc"
    );
    assert_eq!(slug("`explain --output json`"), "explain---output-json");
    let a = anchors("# X\n## Figures\n```\n# not a heading\n```\n## Figures\n");
    assert_eq!(a, ["figures", "figures-1", "x"].map(String::from).into());
}

/// The flags a `--help` text lists: the `-x` and `--long` words that open
/// its option lines.
fn flags_of(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in help.lines() {
        let line = line.trim_start();
        if !line.starts_with('-') {
            continue;
        }
        for word in line.split([' ', ',', '=', '<', '[']) {
            if word.starts_with('-') && word.len() > 1 && !word.ends_with('.') {
                flags.insert(word.trim_end_matches("...").to_owned());
            }
        }
    }
    flags
}

/// Runs the binary under test with `args`; its stdout.
fn safeprune(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_safeprune"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run safeprune");
    assert!(out.status.success(), "safeprune {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The command line as `--help` knows it: the subcommands and each one's
/// flags, the global ones among them.
struct Cli {
    global: BTreeSet<String>,
    commands: BTreeMap<String, BTreeSet<String>>,
}

impl Cli {
    fn load() -> Cli {
        let top = safeprune(&["--help"]);
        let global = flags_of(&top);
        let names: Vec<String> = top
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect();
        assert!(names.iter().any(|n| n == "plan"), "no plan in\n{top}");
        let commands = names
            .into_iter()
            .map(|name| {
                // `help` takes no flags, and no `--help` of its own.
                let flags = if name == "help" {
                    BTreeSet::new()
                } else {
                    flags_of(&safeprune(&[&name, "--help"]))
                };
                (name, flags)
            })
            .collect();
        Cli { global, commands }
    }

    /// What is wrong with one `safeprune …` command line, if anything.
    fn check(&self, words: &[&str]) -> Option<String> {
        const GLOBAL_VALUES: [&str; 3] = ["--config", "--log-format", "--color"];
        let mut i = 0;
        let mut command = None;
        while i < words.len() {
            let w = words[i];
            if !w.starts_with('-') {
                command = Some(w);
                break;
            }
            let flag = w.split('=').next().unwrap();
            if !self.global.contains(flag) {
                return Some(format!("`{flag}` is no global flag"));
            }
            if GLOBAL_VALUES.contains(&flag) && !w.contains('=') {
                i += 1;
            }
            i += 1;
        }
        let Some(command) = command else {
            return None; // `safeprune --help`, `safeprune -V`
        };
        let Some(flags) = self.commands.get(command) else {
            return Some(format!("`{command}` is no subcommand"));
        };
        for w in &words[i + 1..] {
            if w.starts_with('-') && *w != "-" {
                let flag = w.split('=').next().unwrap();
                if !flags.contains(flag) && !self.global.contains(flag) {
                    return Some(format!("`{command}` has no flag `{flag}`"));
                }
            }
        }
        None
    }
}

/// The `safeprune …` command lines of a document's code blocks: in a block
/// that shows a session (some line starts with a `$ ` prompt) the prompted
/// lines only, else every line; a command also after `sudo `, `| ` or
/// `&& `. Each as its words up to a comment, redirection or the next
/// command.
fn command_lines(text: &str) -> Vec<(usize, Vec<String>)> {
    let (_, blocks) = split(text);
    let mut found = Vec::new();
    for block in blocks {
        if !["", "sh", "console", "shell", "bash"].contains(&block.lang.as_str()) {
            continue;
        }
        let session = block.lines.iter().any(|(_, l)| l.starts_with("$ "));
        for (n, line) in &block.lines {
            let line = line.trim();
            let prompted = line.starts_with("$ ") || line.starts_with("# ");
            if session && !prompted {
                continue;
            }
            let mut segments = vec![line];
            for sep in ["| ", "&& "] {
                segments.extend(
                    line.match_indices(sep)
                        .map(|(at, _)| &line[at + sep.len()..]),
                );
            }
            for segment in segments {
                // A synopsis (`safeprune [--config PATH] <command>`), not a
                // command line.
                if segment.contains(" [-") || segment.contains(" <") && !segment.contains(" <<") {
                    continue;
                }
                let mut s = segment.trim_start();
                for prefix in ["$ ", "# ", "sudo "] {
                    s = s.strip_prefix(prefix).unwrap_or(s).trim_start();
                }
                let Some(rest) = s.strip_prefix("safeprune ") else {
                    continue;
                };
                let words: Vec<String> = rest
                    .split_whitespace()
                    .take_while(|w| {
                        !w.starts_with('#')
                            && !w.starts_with('>')
                            && !w.starts_with('<')
                            && !w.starts_with("2>")
                            && !w.starts_with('`')
                            && !["|", "&&", "||", ";", ")"].contains(w)
                    })
                    .map(|w| w.trim_end_matches([';', ')']).to_owned())
                    .collect();
                found.push((*n, words));
            }
        }
    }
    found
}

fn bad_commands(cli: &Cli, docs: &[PathBuf]) -> (usize, Vec<String>) {
    let mut count = 0;
    let mut bad = Vec::new();
    for doc in docs {
        for (n, words) in command_lines(&read(doc)) {
            count += 1;
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            if let Some(wrong) = cli.check(&words) {
                bad.push(format!(
                    "{}:{n}: safeprune {}: {wrong}",
                    doc.display(),
                    words.join(" ")
                ));
            }
        }
    }
    (count, bad)
}

#[test]
fn every_safeprune_command_in_the_docs_is_one_the_binary_takes() {
    let cli = Cli::load();
    let (count, bad) = bad_commands(&cli, &documents());
    assert!(count >= 20, "only {count} safeprune command lines found");
    assert!(
        bad.is_empty(),
        "commands --help does not know:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_command_check_finds_an_unknown_subcommand_and_flag() {
    let cli = Cli::load();
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("a.md");
    fs::write(
        &doc,
        "```sh\nsafeprune plan -o json --compare docker-prune   # fine\n\
         sudo safeprune -q run --dry-run\nsafeprune prune\n\
         safeprune check >/dev/null && safeprune plan --no-such-flag\n```\n\
         ```console\n$ safeprune run -Z\nsafeprune run REFUSED -x\n```\n\
         ```yaml\nsafeprune run --nope\n```\n",
    )
    .unwrap();
    let (count, bad) = bad_commands(&cli, &[doc]);
    assert_eq!(count, 6, "{bad:#?}");
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(bad[0].ends_with("`prune` is no subcommand"), "{}", bad[0]);
    assert!(
        bad[1].ends_with("`plan` has no flag `--no-such-flag`"),
        "{}",
        bad[1]
    );
    assert!(bad[2].ends_with("`run` has no flag `-Z`"), "{}", bad[2]);
}

#[test]
fn the_readme_is_under_300_lines() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(lines < 300, "README.md has {lines} lines");
}
