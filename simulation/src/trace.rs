//! The run's trace: what happened, at which simulated millisecond, in the
//! order it happened. Two runs of one seed must produce the same trace; its
//! digest is what the determinism check compares.

use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// Most lines kept in full; later lines still count toward the digest.
const LINES_KEPT_MAX: usize = 200_000;

/// Lines of the trace and a running digest over all of them.
#[derive(Debug)]
pub struct Trace {
    lines: Vec<String>,
    hasher: Sha256,
    count: u64,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            lines: Vec::new(),
            hasher: Sha256::new(),
            count: 0,
        }
    }
}

impl Trace {
    /// Records `what` by `who` at simulated time `at_ms`.
    pub fn push(&mut self, at_ms: u64, who: &str, what: &str) {
        let line = format!("[{at_ms:>8}] {who:<6} {what}");
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.count += 1;
        if self.lines.len() < LINES_KEPT_MAX {
            self.lines.push(line);
        }
    }

    /// The lines kept.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Lines recorded, kept or not.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// SHA-256 over every line, as lowercase hex.
    pub fn digest(&self) -> String {
        let bytes = self.hasher.clone().finalize();
        let mut hex = String::with_capacity(64);
        for b in bytes {
            let _ = write!(hex, "{b:02x}");
        }
        hex
    }
}
