//! How deeply a policy document nests, measured before any parser sees it.
//!
//! A YAML or TOML parser walks nested collections recursively, and some
//! take time that grows with depth far faster than the text does (a 200 KB
//! document of 100,000 nested `[` cost 40 s of CPU). A policy document is
//! shallow by nature (`servers.NAME.tools.NAME.breaker.FIELD` is six deep),
//! so a document nested deeper than the bounds here is refused by a single
//! linear scan: flow collections (`[`, `{`) outside strings, and the
//! indentation of block collections. The scan errs on the side of counting:
//! a quote opens a string only where a value may start, and a string ends
//! at the end of its line, so a stray quote cannot hide brackets from it.

use crate::limits::{POLICY_INDENT_COLUMNS_MAX, POLICY_NESTING_DEPTH_MAX};

/// The first bound the text breaks, as a rule a policy problem can state.
pub(super) fn nesting_problem(text: &str) -> Option<String> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut comment = false;
    let mut line_start = true;
    let mut indent = 0usize;
    let mut previous = '\n';
    for c in text.chars() {
        let before = std::mem::replace(&mut previous, c);
        if c == '\n' {
            (comment, line_start, indent, quote) = (false, true, 0, None);
            continue;
        }
        if line_start {
            if c == ' ' || c == '\t' {
                indent += 1;
                if indent > POLICY_INDENT_COLUMNS_MAX {
                    return Some(format!(
                        "is indented more than {POLICY_INDENT_COLUMNS_MAX} columns"
                    ));
                }
                continue;
            }
            line_start = false;
        }
        if comment {
            continue;
        }
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' if starts_value(before) => quote = Some(c),
                '#' => comment = true,
                '[' | '{' => {
                    depth += 1;
                    if depth > POLICY_NESTING_DEPTH_MAX {
                        return Some(format!(
                            "nests collections more than {POLICY_NESTING_DEPTH_MAX} deep"
                        ));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    None
}

/// Whether a quote after `before` opens a string (`key = "`, `[ '`, a
/// line's first character) rather than sitting inside a word (`don't`).
fn starts_value(before: char) -> bool {
    before.is_whitespace() || matches!(before, ':' | '=' | ',' | '[' | '{' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shallow_documents_pass_and_deep_ones_are_named() {
        let shallow =
            "[servers.a.tools.b.breaker]\nfailure_ratio = 0.5\nretry_on = [\"timeout\"]\n";
        assert_eq!(nesting_problem(shallow), None);
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let problem = nesting_problem(&deep).unwrap();
        assert!(problem.contains("nests collections"), "{problem}");
        let indented = format!("a:\n{}b: 1\n", " ".repeat(POLICY_INDENT_COLUMNS_MAX + 1));
        assert!(nesting_problem(&indented).unwrap().contains("indented"));
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let text = format!(
            "a = \"{}\"\nb = '{}'\n# {}\nc = \"\\\"[[\"\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100)
        );
        assert_eq!(nesting_problem(&text), None);
    }

    #[test]
    fn a_stray_quote_hides_nothing() {
        let deep = "[".repeat(POLICY_NESTING_DEPTH_MAX + 1);
        for text in [
            format!("reason: don't {deep}"),
            format!("a = 'unclosed\n{deep}"),
        ] {
            assert!(nesting_problem(&text).is_some(), "{text}");
        }
    }
}
