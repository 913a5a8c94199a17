//! Plain-text tables and field lists for the operators' commands.
//!
//! Columns are padded to their widest cell so a table reads in a terminal
//! and greps line by line; the last column is never padded, so lines carry
//! no trailing blanks. Everything is rendered to a `String` first, which
//! keeps the layout testable without a terminal.

use crate::out::outln;
use fusebox_proto::v1 as pb;

/// A table with a header row.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column headers.
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells show as empty, extra cells are dropped.
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as lines of text, header first.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let header: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        std::iter::once(&header)
            .chain(&self.rows)
            .map(|row| line(row, &widths))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Prints the table to stdout.
    pub fn print(&self) {
        outln!("{}", self.render());
    }
}

fn line(cells: &[String], widths: &[usize]) -> String {
    let last = cells.len().saturating_sub(1);
    cells
        .iter()
        .zip(widths)
        .enumerate()
        .map(|(i, (cell, w))| {
            if i == last {
                cell.clone()
            } else {
                format!("{cell:<w$}")
            }
        })
        .collect::<Vec<_>>()
        .join("  ")
        .trim_end()
        .to_owned()
}

/// Labelled values, one per line, labels padded to the widest.
pub fn render_fields(fields: &[(&str, String)]) -> String {
    let width = fields
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    fields
        .iter()
        .map(|(label, value)| format!("{label:<width$}  {value}").trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Prints labelled values to stdout.
pub fn print_fields(fields: &[(&str, String)]) {
    outln!("{}", render_fields(fields));
}

/// A cell for an optional value: the value, or `-`.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// An effect class as operators read it (`unspecified` when unset).
pub fn effect_name(effect: i32) -> &'static str {
    match pb::Effect::try_from(effect) {
        Ok(pb::Effect::ReadOnly) => "read_only",
        Ok(pb::Effect::ExpensiveRead) => "expensive_read",
        Ok(pb::Effect::IdempotentWrite) => "idempotent_write",
        Ok(pb::Effect::NonIdempotentWrite) => "non_idempotent_write",
        _ => "unspecified",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_lines_have_no_trailing_blanks() {
        let mut t = Table::new(&["KEY", "STATE", "NOTE"]);
        t.row(vec!["a/b".into(), "open".into(), String::new()]);
        t.row(vec!["a/bcd/e".into(), "closed".into(), "x".into()]);
        assert_eq!(
            t.render(),
            "KEY      STATE   NOTE\na/b      open\na/bcd/e  closed  x"
        );
    }

    #[test]
    fn short_rows_are_padded_with_empty_cells() {
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["1".into()]);
        assert_eq!(t.render(), "A  B\n1");
    }

    #[test]
    fn fields_align_on_the_widest_label() {
        let text = render_fields(&[("state", "open".into()), ("generation", "3".into())]);
        assert_eq!(text, "state       open\ngeneration  3");
        assert_eq!(or_dash(None::<u64>), "-");
    }
}
