//! Hostile policies: how long `safeprune check` takes and how
//! much memory it uses on each case of the corpus, and on the largest
//! policies that are accepted. Every case must stay within 1 s and 100 MB.
//!
//! Run: `cargo bench --bench hostile_policies` (needs `/usr/bin/time`).
//! Prints figures; asserts nothing, because these machines are noisy.

#[path = "../../tests/integration/hostile/cases.rs"]
mod cases;

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What one `check` came to.
struct Row {
    name: String,
    wall: f64,
    peak_kb: u64,
    exit: Option<i32>,
    /// Whether the message says what the case expects.
    says: bool,
}

/// Wall seconds, peak resident KB, exit code and stderr of
/// `safeprune --config PATH check`.
fn measure(path: &Path) -> (f64, u64, Option<i32>, String) {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%e %M %x"])
        .arg(env!("CARGO_BIN_EXE_safeprune"))
        .arg("--config")
        .arg(path)
        .arg("check")
        .output()
        .expect("/usr/bin/time runs (Debian package `time`)");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = err.lines().last().unwrap_or_default();
    let mut fields = last.split_whitespace();
    let wall = fields
        .next()
        .and_then(|f| f.parse().ok())
        .unwrap_or(f64::NAN);
    let kb = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
    let code = fields.next().and_then(|f| f.parse().ok());
    (wall, kb, code, err)
}

/// A list of 256 entries under `head`, each `entry(i)`.
type Shape = (&'static str, &'static str, fn(usize) -> String);

/// The largest policies the limits let through: 256 globs (or label rules)
/// of about 1,024 characters each, in the shapes that compile slowest.
fn largest_accepted(scratch: &Path) -> Vec<(String, PathBuf)> {
    let shapes: [Shape; 4] = [
        ("globs a*a*…", "images:\n  keep:\n", |i| {
            format!("{}{i:04}", "a*".repeat(510))
        }),
        ("globs *?*?…", "images:\n  keep:\n", |i| {
            format!("{}{i:04}", "*?".repeat(510))
        }),
        ("globs {a,…,z}…", "images:\n  keep:\n", |i| {
            let letters = "{a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,z}";
            format!("{}{i:04}", letters.repeat(19))
        }),
        ("label rules [a-z]…", "protect:\n  labels:\n", |i| {
            format!("k{i:04}={}", "[a-z]".repeat(203))
        }),
    ];
    shapes
        .iter()
        .enumerate()
        .map(|(n, (name, head, entry))| {
            let mut text = (*head).to_owned();
            for i in 0..256 {
                writeln!(text, "    - \"{}\"", entry(i)).unwrap();
            }
            let path = scratch.join(format!("accepted-{n}.yaml"));
            std::fs::write(&path, text).unwrap();
            ((*name).to_owned(), path)
        })
        .collect()
}

fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let mut rows: Vec<Row> = cases::cases(scratch.path())
        .iter()
        .map(|c| {
            let (wall, peak_kb, exit, err) = measure(&c.path);
            Row {
                name: c.name.clone(),
                wall,
                peak_kb,
                exit,
                says: err.contains(c.says),
            }
        })
        .collect();
    let refused = rows.len();
    for (name, path) in largest_accepted(scratch.path()) {
        let (wall, peak_kb, exit, _) = measure(&path);
        rows.push(Row {
            name: format!("accepted: {name}"),
            wall,
            peak_kb,
            exit,
            says: true,
        });
    }
    println!(
        "{:<36} {:>8} {:>10} {:>5} {:>5}",
        "case", "wall (s)", "peak (MB)", "exit", "says"
    );
    for r in &rows {
        let code = r.exit.map_or("-".to_owned(), |c| c.to_string());
        println!(
            "{:<36} {:>8.2} {:>10.1} {code:>5} {:>5}",
            r.name,
            r.wall,
            megabytes(r.peak_kb),
            if r.says { "yes" } else { "NO" }
        );
    }
    let worst_wall = rows.iter().map(|r| r.wall).fold(0.0, f64::max);
    let worst_peak = rows.iter().map(|r| r.peak_kb).max().unwrap_or(0);
    let wrong = rows[..refused]
        .iter()
        .filter(|r| r.exit != Some(2) || !r.says)
        .count();
    println!(
        "{refused} refused cases ({wrong} without exit 2 and their message), {} accepted; \
         worst wall {worst_wall:.2} s, worst peak {:.1} MB (bounds: 1 s, 100 MB)",
        rows.len() - refused,
        megabytes(worst_peak)
    );
}

#[expect(clippy::cast_precision_loss, reason = "a printed figure")]
fn megabytes(kb: u64) -> f64 {
    kb as f64 / 1024.0
}
