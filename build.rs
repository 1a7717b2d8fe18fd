//! Writes what the Debian package ships beside the binary (Cargo.toml,
//! `[package.metadata.deb]`): the man page safeprune(8), the bash, zsh and
//! fish completions, and the systemd units with the package's binary path.
//! The page and the completions are `src/manual.rs`'s, from the clap
//! definitions and the exit-code table themselves, so they cannot drift
//! from the binary: `safeprune man` and `safeprune completions SHELL` print
//! the same text. The page's date goes to the binary too, as
//! `SAFEPRUNE_MAN_DATE`.
//!
//! Deterministic: no clock, no environment but cargo's.

#[path = "src/cli.rs"]
mod cli;
#[path = "src/exit_codes.rs"]
#[expect(
    dead_code,
    reason = "the page reads the table; the constants are the binary's"
)]
mod exit_codes;
#[path = "src/manual.rs"]
mod manual;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use cli::Shell;

/// The page's date is the package's: its latest changelog entry's.
const CHANGELOG: &str = "debian/changelog";

/// Where the repository's units run safeprune (a manual install), and where
/// the package puts it.
const MANUAL_BIN: &str = "/usr/local/bin/safeprune";
const PACKAGE_BIN: &str = "/usr/sbin/safeprune";

fn main() {
    let inputs = [
        "build.rs",
        "src/cli.rs",
        "src/exit_codes.rs",
        "src/manual.rs",
        "systemd",
        CHANGELOG,
    ];
    for input in inputs {
        println!("cargo:rerun-if-changed={input}");
    }
    // cargo-deb finds built files only under `target/release/`, which it
    // maps to the profile's directory (target/<profile>/, also with
    // CARGO_TARGET_DIR or --target); OUT_DIR has a hash in its name. So the
    // assets go to the profile's directory, OUT_DIR's third ancestor
    // (target/<profile>/build/safeprune-<hash>/out), as target/release/assets/
    // in Cargo.toml.
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let assets = out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR is target/<profile>/build/<crate>-<hash>/out")
        .join("assets");
    let completions = assets.join("completions");
    let units = assets.join("systemd");
    for dir in [&assets, &completions, &units] {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    }

    // The page to read (`man -l`), and gzipped at the best level, without a
    // name or time, as Debian ships pages (`gzip -9n`): cargo-deb compresses
    // only the files it did not build.
    let date = release_date();
    println!("cargo:rustc-env=SAFEPRUNE_MAN_DATE={date}");
    let page = manual::man_page(&date);
    write(&assets.join("safeprune.8"), page.as_bytes());
    let mut gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
    gz.write_all(page.as_bytes())
        .and_then(|()| gz.try_finish())
        .expect("gzip in memory cannot fail");
    write(&assets.join("safeprune.8.gz"), gz.get_ref());
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        write(
            &completions.join(manual::completion_file(shell)),
            manual::completion(shell).as_bytes(),
        );
    }
    package_units(Path::new("systemd"), &units);
}

fn write(path: &Path, contents: &[u8]) {
    fs::write(path, contents).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// The repository's units with the package's binary path. A service that
/// does not name `MANUAL_BIN` would run something else from the package,
/// so it fails the build; a timer names no binary and is copied as it is.
fn package_units(from: &Path, to: &Path) {
    let mut names: Vec<PathBuf> = fs::read_dir(from)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", from.display()))
        .map(|entry| entry.expect("a readable systemd/ entry").path())
        .collect();
    names.sort();
    for path in names {
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let is_service = path.extension().is_some_and(|e| e == "service");
        assert!(
            !is_service || text.contains(MANUAL_BIN),
            "{} runs no {MANUAL_BIN}: the package's copy could not run {PACKAGE_BIN}; \
             fix the unit or build.rs",
            path.display()
        );
        let name = path.file_name().expect("a file name");
        write(
            &to.join(name),
            text.replace(MANUAL_BIN, PACKAGE_BIN).as_bytes(),
        );
    }
}

/// The date of the changelog's latest entry, as YYYY-MM-DD: its trailer
/// line ends in an RFC 2822 date, ` -- Name <mail>  Mon, 23 Nov 2026 12:00:00 +0000`.
fn release_date() -> String {
    let changelog =
        fs::read_to_string(CHANGELOG).unwrap_or_else(|e| panic!("cannot read {CHANGELOG}: {e}"));
    let trailer = changelog
        .lines()
        .find(|line| line.starts_with(" -- "))
        .unwrap_or_else(|| panic!("{CHANGELOG} has no ` -- ` trailer line"));
    let date = trailer.rsplit("  ").next().unwrap_or_default();
    let fields: Vec<&str> = date.split_whitespace().collect();
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    match fields[..] {
        [_, day, month, year, ..] if months.contains(&month) => {
            let month = months.iter().position(|m| *m == month).unwrap_or_default() + 1;
            format!("{year}-{month:02}-{day:0>2}")
        }
        _ => panic!("{CHANGELOG}: no date in the trailer line {trailer:?}"),
    }
}
