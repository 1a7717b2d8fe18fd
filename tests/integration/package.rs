//! What the Debian package ships beside the binary, as build.rs writes it
//! into the build's profile directory (`assets/`, which Cargo.toml's
//! `[package.metadata.deb]` names as `target/release/assets/`): the man page
//! documents every command, option, exit code, file and variable; the
//! completions know every command; the package's units are the repository's
//! run from /usr/sbin/safeprune; and every asset Cargo.toml names is built.
//!
//! `scripts/deb-test.sh` builds the package itself, lints it and installs
//! it in a fresh Debian 12.

use std::fs;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use safeprune::cli::{Cli, Command};
use safeprune::exit_codes;

/// `target/<profile>/assets`, next to the binary under test.
fn assets() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_safeprune"))
        .parent()
        .unwrap()
        .join("assets")
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The roff source's lines from `.SH heading` to the next `.SH`.
fn man_section(page: &str, heading: &str) -> String {
    let heading = if heading.contains(' ') {
        format!("\"{heading}\"")
    } else {
        heading.to_owned()
    };
    let start = page
        .find(&format!(".SH {heading}\n"))
        .unwrap_or_else(|| panic!("the man page has no {heading} section"));
    let body = &page[start + 1..];
    body[..body.find("\n.SH ").map_or(body.len(), |end| end + 1)].to_owned()
}

/// Roff's escaped dashes as plain ones, for searching.
fn plain(roff: &str) -> String {
    roff.replace("\\-", "-")
}

/// The words without roff's font changes either.
fn words(roff: &str) -> String {
    ["\\fB", "\\fI", "\\fR"]
        .iter()
        .fold(plain(roff), |text, font| text.replace(font, ""))
}

#[test]
fn the_man_page_documents_each_command_and_its_options() {
    let page = words(&read(assets().join("safeprune.8")));
    assert!(page.contains(".TH SAFEPRUNE 8 "), "section 8");
    let cli = Cli::command();
    let options = man_section(&page, "OPTIONS");
    for arg in cli.get_arguments().filter_map(clap::Arg::get_long) {
        assert!(
            options.contains(&format!("--{arg}")),
            "OPTIONS lacks --{arg}"
        );
    }
    let commands = man_section(&page, "COMMANDS");
    let blocks: Vec<&str> = commands.split("\n.SS ").skip(1).collect();
    let names: Vec<&str> = blocks.iter().map(|b| b.lines().next().unwrap()).collect();
    let expected: Vec<&str> = cli.get_subcommands().map(clap::Command::get_name).collect();
    assert_eq!(names, expected);
    for (block, sub) in blocks.iter().zip(cli.get_subcommands()) {
        assert!(
            block.contains(&format!("safeprune {}", sub.get_name())),
            "{block}"
        );
        for arg in sub.get_arguments() {
            let shown = arg.get_long().map_or_else(
                || format!("<{}>", arg.get_id().as_str().to_uppercase()),
                |long| format!("--{long}"),
            );
            assert!(block.contains(&shown), "{}: no {shown}", sub.get_name());
        }
    }
}

#[test]
fn the_man_page_lists_every_exit_code_file_and_variable() {
    let page = plain(&read(assets().join("safeprune.8")));
    let status = man_section(&page, "EXIT STATUS");
    let listed: Vec<&str> = status
        .lines()
        .filter_map(|l| l.strip_prefix("\\fB"))
        .filter_map(|l| l.strip_suffix("\\fR"))
        .collect();
    let codes: Vec<String> = exit_codes::ALL.iter().map(|c| c.code.to_string()).collect();
    assert_eq!(listed, codes);
    let files = man_section(&page, "FILES");
    for path in [
        "/etc/safeprune/policy.yaml",
        "the built-in default",
        "/run/safeprune.lock",
        "/var/lib/safeprune",
        "/var/log/safeprune",
        "/usr/lib/systemd/system/safeprune.service",
        "/usr/lib/systemd/system/safeprune.timer",
        "/usr/lib/systemd/system/safeprune-daemon.service",
    ] {
        assert!(
            files.contains(&format!("\\fB{path}\\fR")),
            "FILES lacks {path}"
        );
    }
    let environment = man_section(&page, "ENVIRONMENT");
    for variable in [
        "SAFEPRUNE_CONFIG",
        "SAFEPRUNE_NODE_NAME",
        "RUST_LOG",
        "NO_COLOR",
    ] {
        assert!(
            environment.contains(variable),
            "ENVIRONMENT lacks {variable}"
        );
    }
    // The gzipped page is the package's; it holds the same page.
    let gz = fs::read(assets().join("safeprune.8.gz")).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip");
    assert_eq!(&gz[4..8], &[0, 0, 0, 0], "no time stamp in the gzip header");
}

#[test]
fn the_completions_know_every_command() {
    let dir = assets().join("completions");
    for file in ["safeprune.bash", "_safeprune", "safeprune.fish"] {
        let text = read(dir.join(file));
        for sub in Cli::command().get_subcommands() {
            assert!(
                text.contains(sub.get_name()),
                "{file} lacks {}",
                sub.get_name()
            );
        }
    }
}

#[test]
fn the_package_units_are_the_repository_units_run_from_usr_sbin() {
    let packaged = assets().join("systemd");
    let mut names: Vec<String> = fs::read_dir("systemd")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "safeprune-daemon.service",
            "safeprune.service",
            "safeprune.timer"
        ]
    );
    for name in &names {
        let manual = read(Path::new("systemd").join(name));
        let package = read(packaged.join(name));
        assert_eq!(
            package,
            manual.replace("/usr/local/bin/safeprune", "/usr/sbin/safeprune"),
            "{name}"
        );
        assert!(!package.contains("/usr/local/bin"), "{name}");
        if let Some(line) = package.lines().find_map(|l| l.strip_prefix("ExecStart=")) {
            let mut words = line.split_whitespace();
            assert_eq!(words.next(), Some("/usr/sbin/safeprune"), "{name}");
            let cli = Cli::try_parse_from(std::iter::once("safeprune").chain(words))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(matches!(cli.command, Command::Run(_) | Command::Daemon));
        }
    }
}

#[test]
fn every_built_asset_the_package_names_is_built() {
    let manifest = read("Cargo.toml");
    let named: Vec<&str> = manifest
        .split('"')
        .filter_map(|s| s.strip_prefix("target/release/assets/"))
        .collect();
    assert!(named.len() >= 7, "{named:?}");
    for asset in named {
        assert!(assets().join(asset).is_file(), "build.rs wrote no {asset}");
    }
}
