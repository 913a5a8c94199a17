//! Answer patterns: the policy's word on answers whose form misleads.
//!
//! A tool's answer is classified by its form first (an error result is a
//! failure, a plain result a success). Some tools say more in their words
//! than in their form: a search that reports "no such customer" as an
//! error did its job; a lookup that answers "service temporarily
//! unavailable" as a plain result did not. A policy layer may list text
//! fragments for those cases:
//!
//! ```toml
//! [servers.crm.tools.find_customer.classify]
//! success = ["no such customer"]           # an error answer that is a success
//! caller_error = ["invalid customer id"]   # the caller's mistake: not counted
//! failure = ["temporarily unavailable"]    # a plain answer that is a failure
//! ```
//!
//! Patterns are literal fragments matched case-insensitively anywhere in
//! the first 16 KiB of the answer's text, not regular expressions: an
//! operator can read at a glance what one matches, and matching costs time
//! linear in the answer whatever the pattern. Each list resolves as a whole, the most specific
//! layer that sets it winning, so a tool's list replaces its server's.

use crate::limits::{CLASSIFY_PATTERNS_MAX, CLASSIFY_PATTERN_BYTES_MAX, CLASSIFY_TEXT_BYTES_MAX};
use serde::{Deserialize, Serialize};

/// Optional answer patterns of one policy layer; `None` inherits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifyOverrides {
    /// Fragments that make a plain (non-error) answer a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Vec<String>>,
    /// Fragments that make an error answer a success (the tool worked;
    /// what was asked for is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<Vec<String>>,
    /// Fragments that make an error answer the caller's mistake, not
    /// counted against the tool (as invalid arguments are not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_error: Option<Vec<String>>,
}

impl ClassifyOverrides {
    /// Whether this layer sets no list.
    pub fn is_empty(&self) -> bool {
        *self == ClassifyOverrides::default()
    }

    /// Every broken rule of this layer's lists, as (field, rule) pairs
    /// under `prefix`.
    pub(super) fn problems(&self, prefix: &str) -> Vec<(String, String)> {
        let lists = [
            ("failure", &self.failure),
            ("success", &self.success),
            ("caller_error", &self.caller_error),
        ];
        let mut found = Vec::new();
        for (name, list) in lists {
            let Some(list) = list else { continue };
            let field = format!("{prefix}.{name}");
            if list.len() > CLASSIFY_PATTERNS_MAX {
                let rule = format!(
                    "holds {} patterns, at most {CLASSIFY_PATTERNS_MAX} allowed",
                    list.len()
                );
                found.push((field.clone(), rule));
            }
            for pattern in list {
                if pattern.trim().is_empty() {
                    found.push((
                        field.clone(),
                        "a pattern is empty; it would match every answer".to_owned(),
                    ));
                } else if pattern.len() > CLASSIFY_PATTERN_BYTES_MAX {
                    let rule = format!(
                        "a pattern is {} bytes, at most {CLASSIFY_PATTERN_BYTES_MAX} allowed",
                        pattern.len()
                    );
                    found.push((field.clone(), rule));
                }
            }
        }
        found
    }
}

/// How the policy's patterns judge one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The answer is a failure of the tool, whatever its form.
    Failure,
    /// The answer is a success, whatever its form.
    Success,
    /// The answer is the caller's mistake: not counted against the tool.
    CallerError,
}

/// A tool's resolved answer patterns, lowercased for matching.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classification {
    /// Fragments that make a plain answer a failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure: Vec<String>,
    /// Fragments that make an error answer a success.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub success: Vec<String>,
    /// Fragments that make an error answer the caller's mistake.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caller_error: Vec<String>,
}

impl Classification {
    /// Resolves each list from the most specific layer that sets it.
    pub(super) fn resolve<'a>(layers: impl Iterator<Item = &'a ClassifyOverrides> + Clone) -> Self {
        let pick = |list: fn(&ClassifyOverrides) -> &Option<Vec<String>>| -> Vec<String> {
            layers
                .clone()
                .find_map(|layer| list(layer).as_ref())
                .map(|patterns| patterns.iter().map(|p| p.to_lowercase()).collect())
                .unwrap_or_default()
        };
        Classification {
            failure: pick(|l| &l.failure),
            success: pick(|l| &l.success),
            caller_error: pick(|l| &l.caller_error),
        }
    }

    /// Whether no pattern is set (every answer is judged by its form).
    pub fn is_empty(&self) -> bool {
        self.failure.is_empty() && self.success.is_empty() && self.caller_error.is_empty()
    }

    /// What the patterns say of an answer whose text is `text` (its first
    /// `CLASSIFY_TEXT_BYTES_MAX` bytes); `is_error` is its form. An error answer is checked against `caller_error` first,
    /// then `success`; a plain answer against `failure`. `None`: no pattern
    /// matched, and the form decides.
    pub fn judge(&self, text: &str, is_error: bool) -> Option<Verdict> {
        if self.is_empty() {
            return None;
        }
        let mut end = text.len().min(CLASSIFY_TEXT_BYTES_MAX);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let text = text[..end].to_lowercase();
        let any = |patterns: &[String]| patterns.iter().any(|p| text.contains(p.as_str()));
        if is_error {
            if any(&self.caller_error) {
                Some(Verdict::CallerError)
            } else if any(&self.success) {
                Some(Verdict::Success)
            } else {
                None
            }
        } else if any(&self.failure) {
            Some(Verdict::Failure)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(failure: &[&str], success: &[&str], caller: &[&str]) -> ClassifyOverrides {
        let list = |l: &[&str]| (!l.is_empty()).then(|| l.iter().map(|s| s.to_string()).collect());
        ClassifyOverrides {
            failure: list(failure),
            success: list(success),
            caller_error: list(caller),
        }
    }

    #[test]
    fn patterns_judge_by_form_and_words_case_insensitively() {
        let c = Classification::resolve(
            [layer(
                &["Temporarily Unavailable"],
                &["no such"],
                &["invalid id"],
            )]
            .iter(),
        );
        assert_eq!(
            c.judge("Service TEMPORARILY unavailable", false),
            Some(Verdict::Failure)
        );
        // A fragment for error answers says nothing of a plain one.
        assert_eq!(c.judge("no such customer", false), None);
        assert_eq!(
            c.judge("No such customer: 42", true),
            Some(Verdict::Success)
        );
        assert_eq!(
            c.judge("invalid id; no such thing", true),
            Some(Verdict::CallerError)
        );
        assert_eq!(c.judge("rate table missing", true), None);
        assert_eq!(Classification::default().judge("anything", true), None);
        // Only the head of a long answer is read, cut on a character.
        let late = format!(
            "{}é temporarily unavailable",
            "x".repeat(CLASSIFY_TEXT_BYTES_MAX - 1)
        );
        assert_eq!(c.judge(&late, false), None);
        assert_eq!(
            c.judge(&late[CLASSIFY_TEXT_BYTES_MAX - 1..], false),
            Some(Verdict::Failure)
        );
    }

    #[test]
    fn the_most_specific_layer_that_sets_a_list_wins_it_whole() {
        let tool = layer(&[], &["gone"], &[]);
        let server = layer(&["down"], &["absent", "missing"], &[]);
        let c = Classification::resolve([tool, server].iter());
        assert_eq!(c.success, vec!["gone".to_owned()]);
        assert_eq!(c.failure, vec!["down".to_owned()]);
        assert!(c.caller_error.is_empty());
    }

    #[test]
    fn empty_long_and_too_many_patterns_are_problems() {
        let many: Vec<String> = (0..=CLASSIFY_PATTERNS_MAX)
            .map(|i| format!("p{i}"))
            .collect();
        let overrides = ClassifyOverrides {
            failure: Some(many),
            success: Some(vec!["  ".to_owned()]),
            caller_error: Some(vec!["x".repeat(CLASSIFY_PATTERN_BYTES_MAX + 1)]),
        };
        let problems = overrides.problems("defaults.classify");
        let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "defaults.classify.failure",
                "defaults.classify.success",
                "defaults.classify.caller_error"
            ]
        );
        assert!(layer(&["ok"], &[], &[]).problems("p").is_empty());
    }
}
