//! Ledger histories on disk: each client writes its operations as JSON
//! lines (`<client>.jsonl`), one per operation once it is settled, with its
//! invoke and complete times in ms since the run began (one clock for
//! every client: they share this process) and no complete time when its
//! outcome is unknown. [`check_dir`] reads every file back and hands the
//! whole history to the simulation's linearizability checker.

use anyhow::{bail, Context, Result};
use fusebox_simulation::check::ledger_model::{
    check_ledger, ledger_op, Clocks, LedgerInput, LedgerOp, LedgerOutput,
};
use fusebox_simulation::check::linearizability::{Limits, Verdict};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

/// Largest history line read back (a record's result is at most a few KB).
const LINE_BYTES_MAX: usize = 1 << 20;
/// Operation ids of one client start at its index times this.
const IDS_PER_CLIENT: u64 = 1 << 40;

/// One client's history file, written as operations settle.
pub struct HistoryWriter {
    out: Mutex<BufWriter<File>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl HistoryWriter {
    /// Creates `dir/<name>.jsonl` for client number `client`.
    pub fn create(dir: &Path, name: &str, client: u64) -> Result<HistoryWriter> {
        std::fs::create_dir_all(dir)?;
        let file = File::create(dir.join(format!("{name}.jsonl")))?;
        Ok(HistoryWriter {
            out: Mutex::new(BufWriter::new(file)),
            next_id: std::sync::atomic::AtomicU64::new(client * IDS_PER_CLIENT),
        })
    }

    /// Appends one operation: invoked at `call`, answered `output` at `ret`
    /// (`None` for both when no answer came).
    pub fn record(
        &self,
        input: LedgerInput,
        call: u64,
        ret: Option<u64>,
        output: Option<LedgerOutput>,
    ) -> Result<()> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let line = serde_json::to_string(&ledger_op(id, call, ret, input, output))?;
        let mut out = self
            .out
            .lock()
            .map_err(|_| anyhow::anyhow!("history writer poisoned"))?;
        writeln!(out, "{line}")?;
        Ok(())
    }

    /// Writes out what is buffered.
    pub fn flush(&self) -> Result<()> {
        let mut out = self
            .out
            .lock()
            .map_err(|_| anyhow::anyhow!("history writer poisoned"))?;
        out.flush()?;
        Ok(())
    }
}

/// Reads every `*.jsonl` history in `dir`, in file-name order.
pub fn read_dir(dir: &Path) -> Result<Vec<LedgerOp>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut ops = Vec::new();
    let mut ids = BTreeSet::new();
    for file in files {
        let reader = BufReader::new(File::open(&file)?);
        for (n, line) in reader.lines().enumerate() {
            let line = line.with_context(|| format!("{}:{}", file.display(), n + 1))?;
            if line.len() > LINE_BYTES_MAX {
                bail!(
                    "{}:{}: a line of {} bytes",
                    file.display(),
                    n + 1,
                    line.len()
                );
            }
            let op: LedgerOp = serde_json::from_str(&line)
                .with_context(|| format!("{}:{}", file.display(), n + 1))?;
            if !ids.insert(op.id) {
                bail!(
                    "{}:{}: operation id {} seen twice",
                    file.display(),
                    n + 1,
                    op.id
                );
            }
            if op.ret.is_some() != op.output.is_some() || op.ret.is_some_and(|r| r < op.call) {
                bail!(
                    "{}:{}: operation {} has a bad return",
                    file.display(),
                    n + 1,
                    op.id
                );
            }
            ops.push(op);
        }
    }
    Ok(ops)
}

/// What the checker made of a history.
#[derive(Debug)]
pub struct Judged {
    /// Operations read.
    pub ops: usize,
    /// Of them, answered.
    pub answered: usize,
    /// Distinct keys.
    pub keys: usize,
    /// The verdict, as text; `None` when linearizable.
    pub problem: Option<String>,
    /// Keys the search gave up on (not a violation; reported).
    pub undecided: Option<String>,
}

/// Reads `dir`'s histories and checks them for linearizability.
pub fn check_dir(dir: &Path) -> Result<Judged> {
    let ops = read_dir(dir)?;
    let answered = ops.iter().filter(|op| op.ret.is_some()).count();
    let keys = ops
        .iter()
        .map(|op| op.key.as_str())
        .collect::<BTreeSet<_>>()
        .len();
    let skew_ms = crate::nemesis::CLOCK_OFFSET_MS_MAX.unsigned_abs();
    let (problem, undecided) = match check_ledger(&ops, Clocks { skew_ms }, Limits::default()) {
        Ok(Verdict::Linearizable) => (None, None),
        Ok(Verdict::Violation(v)) => {
            // The evidence (every operation of the key) goes to a file
            // beside the histories; the problem names it.
            let evidence = dir.join("violation.txt");
            std::fs::write(&evidence, v.to_string())?;
            let problem = format!(
                "not linearizable: key {:?} ({} operations; longest linearizable order ends after #{}); the evidence is in {}",
                v.key,
                v.ops.len(),
                v.longest_prefix.last().map_or_else(|| "-".to_owned(), u64::to_string),
                evidence.display()
            );
            (Some(problem), None)
        }
        Ok(Verdict::Unknown { key, reason }) => (None, Some(format!("key {key}: {reason:?}"))),
        Err(e) => (Some(format!("history refused: {e}")), None),
    };
    Ok(Judged {
        ops: ops.len(),
        answered,
        keys,
        problem,
        undecided,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox_core::ledger::BeginRequest;
    use fusebox_core::policy::EffectClass;
    use fusebox_core::ToolName;

    fn begin(attempt: &str) -> LedgerInput {
        LedgerInput::Begin(BeginRequest {
            key: "k".into(),
            fingerprint: "fp".into(),
            intent_id: "i".into(),
            tool: ToolName::new("charge").expect("tool"),
            target: "t".into(),
            effect: EffectClass::NonIdempotentWrite,
            attempt: attempt.into(),
            lease_ms: 600_000,
        })
    }

    fn started(attempt: &str) -> Option<LedgerOutput> {
        Some(LedgerOutput::Started {
            attempt: attempt.into(),
            takeover: false,
        })
    }

    #[test]
    fn histories_round_trip_through_files_and_violations_are_found() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = HistoryWriter::create(dir.path(), "a", 0).expect("a");
        let b = HistoryWriter::create(dir.path(), "b", 1).expect("b");
        a.record(begin("a1"), 0, Some(10), started("a1"))
            .expect("record");
        b.record(begin("b1"), 5, None, None).expect("record");
        a.flush().expect("flush");
        b.flush().expect("flush");
        let ops = read_dir(dir.path()).expect("read");
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].input, begin("a1"));
        assert_eq!(ops[1].ret, None);
        let judged = check_dir(dir.path()).expect("check");
        assert_eq!((judged.ops, judged.answered, judged.keys), (2, 1, 1));
        assert!(judged.problem.is_none(), "{judged:?}");

        // A second `started` for the key, later, without a release.
        b.record(begin("b2"), 20, Some(30), started("b2"))
            .expect("record");
        b.flush().expect("flush");
        let judged = check_dir(dir.path()).expect("check");
        let problem = judged.problem.expect("a violation");
        assert!(problem.contains("not linearizable"), "{problem}");
    }

    #[test]
    fn malformed_files_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("x.jsonl"), "{not json\n").expect("write");
        assert!(read_dir(dir.path()).is_err());
    }
}
