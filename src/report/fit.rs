//! Tables fitted to a terminal's width: on a terminal, the
//! free-text columns (NAME, WHY) give up their width first, widest first,
//! and a cut cell ends in `…`; an id keeps 12 characters, as docker shows
//! them; a line of prose too long wraps at a space. Output that is piped or
//! redirected is never fitted: scripts and files keep the full width.
//!
//! Widths are counted in characters (`char`s), not bytes: `…` is one.

/// How a column of a table may give up width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Column {
    /// Never cut: decisions, rules, kinds, sizes, results.
    Fixed,
    /// An id: on a narrow terminal, 12 characters without a namespace.
    Id,
    /// Free text: cut, widest first, ending in `…`.
    Text,
}

/// The indent of a row, and the gap between two cells.
pub(super) const INDENT: usize = 2;
pub(super) const GAP: usize = 2;

/// What an id keeps on a narrow terminal: docker's short id.
const ID_WIDTH: usize = 12;

/// What a text column keeps while another text column can still give up
/// width; below it only when the fixed columns leave no more room.
const TEXT_FLOOR: usize = 10;

/// The widest cell of each column.
pub(super) fn widths(rows: &[Vec<String>]) -> Vec<usize> {
    let columns = rows.first().map_or(0, Vec::len);
    (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect()
}

/// Cuts the cells of `rows` (a header row first) so that every row, laid
/// out by `push_rows`, fits in `width` columns when the fixed columns
/// allow it. Rows that fit already are left as they are.
pub(super) fn fit_rows(rows: &mut [Vec<String>], columns: &[Column], width: usize) {
    let natural = widths(rows);
    let line = |w: &[usize]| INDENT + w.iter().sum::<usize>() + GAP * w.len().saturating_sub(1);
    if line(&natural) <= width {
        return;
    }
    let mut w = natural.clone();
    for (i, column) in columns.iter().enumerate() {
        if *column == Column::Id {
            w[i] = w[i].min(ID_WIDTH);
        }
    }
    // The widest text column gives up a character at a time (the rightmost
    // of equals: WHY before NAME), first down to the floor, then below it.
    for floor in [TEXT_FLOOR, 1] {
        while line(&w) > width {
            let widest = (0..w.len())
                .filter(|&i| columns.get(i) == Some(&Column::Text) && w[i] > floor)
                .max_by_key(|&i| w[i]);
            let Some(i) = widest else { break };
            w[i] -= 1;
        }
    }
    for row in rows.iter_mut() {
        for (i, cell) in row.iter_mut().enumerate() {
            if cell.chars().count() <= w[i] {
                continue;
            }
            *cell = match columns.get(i) {
                Some(Column::Id) => cut(bare_id(cell), w[i]),
                Some(Column::Text) => cut(cell, w[i]),
                Some(Column::Fixed) | None => continue,
            };
        }
    }
}

/// An id without its namespace (`k8s.io/0123…` is `0123…`).
fn bare_id(id: &str) -> &str {
    id.rsplit_once('/').map_or(id, |(_, bare)| bare)
}

/// `text` in at most `width` characters, ending in `…` when cut.
pub(super) fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut kept: String = text.chars().take(width - 1).collect();
    kept.push('…');
    kept
}

/// Every line of `text` in at most `width` characters: a longer one wraps
/// at spaces, its continuation indented two more than the line; a word
/// longer than a line is split. Lines that fit are left as they are.
pub(super) fn wrap(text: &str, width: usize) -> String {
    let width = width.max(8);
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let indent = body.len() - body.trim_start_matches(' ').len();
        let hanging = " ".repeat((indent + 2).min(width / 2));
        let mut current = " ".repeat(indent);
        let mut fresh = true;
        for word in body.split(' ').filter(|w| !w.is_empty()) {
            let used = current.chars().count();
            let needed = word.chars().count() + usize::from(!fresh);
            if !fresh && used + needed > width {
                out.push_str(&current);
                out.push('\n');
                current.clone_from(&hanging);
                fresh = true;
            }
            if !fresh {
                current.push(' ');
            }
            // A word longer than what is left is split where the line ends.
            let mut rest: Vec<char> = word.chars().collect();
            loop {
                let room = width.saturating_sub(current.chars().count());
                if rest.len() <= room {
                    current.extend(rest.iter());
                    break;
                }
                current.extend(rest.drain(..room));
                out.push_str(&current);
                out.push('\n');
                current.clone_from(&hanging);
            }
            fresh = false;
        }
        out.push_str(&current);
        out.push_str(newline);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn a_table_that_fits_is_left_as_it_is() {
        let mut rows = vec![row(&["NAME", "ID", "WHY"]), row(&["web", "abc", "running"])];
        let before = rows.clone();
        fit_rows(&mut rows, &[Column::Text, Column::Id, Column::Text], 80);
        assert_eq!(rows, before);
    }

    #[test]
    fn the_widest_text_column_is_cut_first_and_ends_in_an_ellipsis() {
        let mut rows = vec![
            row(&["NAME", "ID", "WHY"]),
            row(&["web", "k8s.io/0123456789ab", &"x".repeat(100)]),
        ];
        fit_rows(&mut rows, &[Column::Text, Column::Id, Column::Text], 40);
        assert_eq!(rows[1][0], "web", "the narrow column keeps its text");
        assert_eq!(rows[1][1], "0123456789ab", "an id keeps 12 characters");
        assert!(rows[1][2].ends_with('…'), "{:?}", rows[1][2]);
        let w = widths(&rows);
        assert!(INDENT + w.iter().sum::<usize>() + GAP * 2 <= 40, "{w:?}");
    }

    #[test]
    fn cut_counts_characters_not_bytes() {
        assert_eq!(cut("ééééé", 5), "ééééé");
        assert_eq!(cut("éééééé", 5), "éééé…");
        assert_eq!(cut("abc", 1), "…");
    }

    #[test]
    fn wrap_breaks_long_lines_at_spaces_with_a_hanging_indent() {
        let text = "  would delete: 2 containers, 3 images, 1 volume (18.8MB reclaimable)\nshort\n";
        let wrapped = wrap(text, 30);
        for line in wrapped.lines() {
            assert!(line.chars().count() <= 30, "{line:?}");
        }
        assert!(
            wrapped.starts_with("  would delete: 2 containers,\n    "),
            "{wrapped}"
        );
        assert!(wrapped.ends_with("\nshort\n"), "{wrapped}");
        assert_eq!(
            wrapped.split_whitespace().collect::<Vec<_>>(),
            text.split_whitespace().collect::<Vec<_>>(),
            "no word is lost"
        );
        // A word longer than the line is split.
        let long = wrap(&format!("runtime: {}", "y".repeat(50)), 20);
        assert!(long.lines().all(|l| l.chars().count() <= 20), "{long}");
    }
}
