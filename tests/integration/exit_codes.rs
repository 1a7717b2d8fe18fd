//! The exit codes are a contract (docs/contracts.md, "Exit codes"): the tables
//! of docs/contracts.md, docs/reference.md and README.md list exactly the codes
//! of `exit_codes::ALL`, which the binary and the man page are made from.

use std::fs;

use safeprune::exit_codes;

/// The rows of the Markdown table under the heading (`## heading` or
/// `### heading`): the cells of each.
fn table(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let text = fs::read_to_string(doc).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let start = ["##", "###"]
        .iter()
        .find_map(|level| text.find(&format!("\n{level} {heading}\n")))
        .unwrap_or_else(|| panic!("{doc} has no {heading}"));
    text[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn the_documented_exit_codes_are_the_table_of_exit_codes() {
    let expected: Vec<(String, String)> = exit_codes::ALL
        .iter()
        .map(|c| (c.code.to_string(), format!("`{}`", c.name)))
        .collect();
    let design: Vec<(String, String)> = table("docs/contracts.md", "Exit codes")
        .into_iter()
        .map(|row| (row[0].clone(), row[1].clone()))
        .collect();
    assert_eq!(design, expected, "docs/contracts.md");
    let codes: Vec<String> = expected.into_iter().map(|(code, _)| code).collect();
    for doc in ["README.md", "docs/reference.md"] {
        let listed: Vec<String> = table(doc, "Exit codes")
            .into_iter()
            .map(|row| row[0].clone())
            .collect();
        assert_eq!(listed, codes, "{doc}");
    }
}
