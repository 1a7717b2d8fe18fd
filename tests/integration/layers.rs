//! The layering of docs/design.md ("Layers"), checked on the source: the
//! pure core (policy, inventory, plan, schedule) depends on no adapter,
//! executor, report or command, the modules that stand apart (`cli`,
//! `exit_codes`, `output`, `shutdown`) import nothing of the crate, `manual`
//! only what build.rs includes beside it, and no module imports one that
//! imports it back. A `use` that breaks any fails here with the file that
//! holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The modules of the pure core and what each may import.
const CORE: [(&str, &[&str]); 4] = [
    ("inventory", &[]),
    ("policy", &["inventory"]),
    ("plan", &["inventory", "policy"]),
    ("schedule", &["policy"]),
];

/// The modules that import nothing of the crate: anyone may use them, and
/// build.rs includes `cli.rs` and `exit_codes.rs` as modules of its own, where
/// `crate::` would name the build script.
const APART: [&str; 4] = ["cli", "exit_codes", "output", "shutdown"];

/// Top-level module → the top-level modules its non-test code names, with
/// one file that does, for the message.
fn imports() -> BTreeMap<String, BTreeMap<String, String>> {
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut files = Vec::new();
    collect(Path::new("src"), &mut files);
    for file in files {
        let rel = file.strip_prefix("src").unwrap();
        let first = rel.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_owned();
        if ["main", "lib"].contains(&module.as_str()) {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        // Unit tests may reach across layers (an in-memory engine in the
        // planner's tests); the layering is about what ships.
        let shipped = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let entry = graph.entry(module.clone()).or_default();
        for (at, _) in shipped.match_indices("crate::") {
            let name: String = shipped[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                entry
                    .entry(name)
                    .or_insert_with(|| file.display().to_string());
            }
        }
        // `use crate::{a, b}` names several at once.
        for group in shipped.split("use crate::{").skip(1) {
            let list = group.split('}').next().unwrap();
            for name in list
                .split(',')
                .map(|s| s.trim().split("::").next().unwrap().trim())
            {
                if !name.is_empty() && name != module {
                    entry
                        .entry(name.to_owned())
                        .or_insert_with(|| file.display().to_string());
                }
            }
        }
    }
    graph
}

fn collect(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !path
                .file_name()
                .is_some_and(|n| n == "tests.rs" || n == "props.rs")
        {
            files.push(path);
        }
    }
}

#[test]
fn the_pure_core_imports_only_the_core_below_it() {
    let graph = imports();
    for (module, allowed) in CORE {
        let uses = graph
            .get(module)
            .unwrap_or_else(|| panic!("no src/{module}"));
        for (name, file) in uses {
            assert!(
                allowed.contains(&name.as_str()),
                "{module} is pure core but {file} imports crate::{name}"
            );
        }
    }
}

#[test]
fn the_modules_apart_import_nothing_of_the_crate() {
    let graph = imports();
    for module in APART {
        let uses = graph
            .get(module)
            .unwrap_or_else(|| panic!("no src/{module}.rs"));
        if let Some((name, file)) = uses.iter().next() {
            panic!("{module} stands apart but {file} imports crate::{name}");
        }
    }
}

/// build.rs includes `manual.rs` too, beside `cli.rs` and `exit_codes.rs`:
/// it may import nothing else of the crate.
#[test]
fn the_manual_imports_only_what_build_rs_includes() {
    let graph = imports();
    let uses = graph.get("manual").expect("src/manual.rs");
    for (name, file) in uses {
        assert!(
            ["cli", "exit_codes"].contains(&name.as_str()),
            "build.rs includes manual.rs, but {file} imports crate::{name}"
        );
    }
}

/// Depth-first search for a circle through `node`; panics with its path.
fn visit<'g>(
    node: &'g str,
    graph: &'g BTreeMap<String, BTreeMap<String, String>>,
    path: &mut Vec<&'g str>,
    done: &mut BTreeSet<&'g str>,
) {
    if let Some(at) = path.iter().position(|n| *n == node) {
        let circle: Vec<String> = path[at..]
            .iter()
            .zip(path[at + 1..].iter().chain([&node]))
            .map(|(a, b)| format!("{a} -> {b} ({})", graph[*a][*b]))
            .collect();
        panic!("import circle: {}", circle.join(", "));
    }
    if !done.insert(node) {
        return;
    }
    path.push(node);
    for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
        visit(next, graph, path, done);
    }
    path.pop();
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = imports();
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(module, &graph, &mut Vec::new(), &mut done);
    }
    assert!(graph.contains_key("plan") && graph.contains_key("runtime"));
}
