//! Reads typed fields out of an untrusted JSON object one by one, so every
//! missing field, wrong type and oversized string is reported on its own
//! instead of as the first serde error.

use serde_json::{Map, Value};

use super::problem::{DisclosureProblem, DisclosureRule};
use super::DISCLOSURE_STRING_BYTES_MAX;

/// A JSON object being read field by field, collecting problems as it goes.
pub(super) struct FieldReader<'a> {
    object: &'a Map<String, Value>,
    /// Path of the object inside the block, empty at the top, with a trailing
    /// dot otherwise (`degradation_modes[2].`).
    prefix: String,
    problems: Vec<DisclosureProblem>,
}

/// How a JSON value looks, for "got …" in a type problem.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(_) => "a boolean".to_string(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".to_string(),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

impl<'a> FieldReader<'a> {
    /// Reads the block's top-level object; its fields' paths are bare names.
    pub(super) fn top(value: &'a Value) -> Result<Self, DisclosureProblem> {
        Self::new(value, "latency_disclosure", String::new())
    }

    /// Reads an object nested at `path`; its fields' paths start `path.`.
    pub(super) fn nested(value: &'a Value, path: &str) -> Result<Self, DisclosureProblem> {
        Self::new(value, path, format!("{path}."))
    }

    fn new(value: &'a Value, path: &str, prefix: String) -> Result<Self, DisclosureProblem> {
        let Value::Object(object) = value else {
            return Err(DisclosureProblem::new(
                DisclosureRule::FieldType,
                path,
                format!("{path} must be an object, got {}", describe(value)),
            ));
        };
        Ok(FieldReader {
            object,
            prefix,
            problems: Vec::new(),
        })
    }

    /// The problems found so far, handing them to the caller.
    pub(super) fn into_problems(self) -> Vec<DisclosureProblem> {
        self.problems
    }

    /// Adds a problem found by the caller (a nested object's, say).
    pub(super) fn push(&mut self, problem: DisclosureProblem) {
        self.problems.push(problem);
    }

    /// The full path of a field of this object.
    pub(super) fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The field's value, `None` when absent or `null` (the spec's example
    /// writes an absent optional as `null`).
    fn present(&self, name: &str) -> Option<&'a Value> {
        self.object.get(name).filter(|v| !v.is_null())
    }

    fn missing(&mut self, name: &str) {
        let path = self.path(name);
        let how = match self.object.get(name) {
            Some(_) => "null",
            None => "missing",
        };
        let message = format!("{path} is required but {how}");
        self.problems.push(DisclosureProblem::new(
            DisclosureRule::FieldMissing,
            path,
            message,
        ));
    }

    fn wrong_type(&mut self, name: &str, expected: &str, got: &Value) {
        let path = self.path(name);
        let message = format!("{path} must be {expected}, got {}", describe(got));
        self.problems.push(DisclosureProblem::new(
            DisclosureRule::FieldType,
            path,
            message,
        ));
    }

    fn u64_of(&mut self, name: &str, value: &Value) -> Option<u64> {
        let parsed = value.as_u64();
        if parsed.is_none() {
            self.wrong_type(name, "a non-negative integer", value);
        }
        parsed
    }

    /// A required non-negative integer.
    pub(super) fn required_u64(&mut self, name: &str) -> Option<u64> {
        match self.present(name) {
            Some(value) => self.u64_of(name, value),
            None => {
                self.missing(name);
                None
            }
        }
    }

    /// An optional non-negative integer; a wrong type is still a problem.
    pub(super) fn optional_u64(&mut self, name: &str) -> Option<u64> {
        let value = self.present(name)?;
        self.u64_of(name, value)
    }

    /// A required boolean.
    pub(super) fn required_bool(&mut self, name: &str) -> Option<bool> {
        let Some(value) = self.present(name) else {
            self.missing(name);
            return None;
        };
        let parsed = value.as_bool();
        if parsed.is_none() {
            self.wrong_type(name, "a boolean", value);
        }
        parsed
    }

    fn string_of(&mut self, name: &str, value: &Value) -> Option<String> {
        let Some(text) = value.as_str() else {
            self.wrong_type(name, "a string", value);
            return None;
        };
        if let Some(problem) = check_string_len(&self.path(name), text) {
            self.problems.push(problem);
            return None;
        }
        Some(text.to_string())
    }

    /// A required string of at most `DISCLOSURE_STRING_BYTES_MAX` bytes.
    pub(super) fn required_string(&mut self, name: &str) -> Option<String> {
        match self.present(name) {
            Some(value) => self.string_of(name, value),
            None => {
                self.missing(name);
                None
            }
        }
    }

    /// An optional string of at most `DISCLOSURE_STRING_BYTES_MAX` bytes.
    pub(super) fn optional_string(&mut self, name: &str) -> Option<String> {
        let value = self.present(name)?;
        self.string_of(name, value)
    }

    /// An optional array; absent or `null` reads as empty.
    pub(super) fn optional_array(&mut self, name: &str) -> &'a [Value] {
        let Some(value) = self.present(name) else {
            return &[];
        };
        match value.as_array() {
            Some(items) => items,
            None => {
                self.wrong_type(name, "an array", value);
                &[]
            }
        }
    }
}

/// The problem with a string field over the byte bound, if it is over.
pub(super) fn check_string_len(path: &str, text: &str) -> Option<DisclosureProblem> {
    if text.len() <= DISCLOSURE_STRING_BYTES_MAX {
        return None;
    }
    let message = format!(
        "{path} is {} bytes, at most {DISCLOSURE_STRING_BYTES_MAX} allowed",
        text.len()
    );
    Some(DisclosureProblem::new(
        DisclosureRule::FieldTooLong,
        path,
        message,
    ))
}
