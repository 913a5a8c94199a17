//! A wall clock with an offset an outside test sets at run time: the
//! nemesis test (`tests/nemesis/`) skews real nodes' clocks through it.
//! Only `fusebox serve --fault-clock-offset-file` (hidden, for tests) uses
//! it; a production node reads the machine's clock unchanged.

use fusebox_server::node::env::system_clock_ms;
use fusebox_server::node::NodeEnv;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the offset file is read again.
const REREAD_EVERY: Duration = Duration::from_millis(100);
/// The largest offset taken, either way (a day); larger ones are clamped.
const OFFSET_MS_MAX: i64 = 24 * 60 * 60 * 1000;

/// The offset a file holds: a signed integer of milliseconds; a missing,
/// unreadable or malformed file means no offset.
fn offset_in(file: &Path) -> i64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| text.trim().parse::<i64>().ok())
        .map_or(0, |ms| ms.clamp(-OFFSET_MS_MAX, OFFSET_MS_MAX))
}

/// The machine's clock plus `offset`, in Unix ms (never below 0).
fn skewed(offset: i64) -> u64 {
    let now = i64::try_from(system_clock_ms()).unwrap_or(i64::MAX);
    u64::try_from(now.saturating_add(offset)).unwrap_or(0)
}

/// The system environment with its clock offset by what `file` holds,
/// re-read every [`REREAD_EVERY`] by a thread that lives as long as the
/// process.
pub fn env_with_offset_file(file: PathBuf) -> std::io::Result<NodeEnv> {
    let offset = Arc::new(AtomicI64::new(offset_in(&file)));
    let shared = offset.clone();
    std::thread::Builder::new()
        .name("fault-clock".into())
        .spawn(move || loop {
            shared.store(offset_in(&file), Ordering::Relaxed);
            std::thread::sleep(REREAD_EVERY);
        })?;
    let mut env = NodeEnv::system();
    env.clock = Arc::new(move || skewed(offset.load(Ordering::Relaxed)));
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_comes_from_the_file_and_follows_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("offset");
        assert_eq!(offset_in(&file), 0, "a missing file is no offset");
        for (text, ms) in [("-2500\n", -2500), ("300", 300), ("soon", 0), ("", 0)] {
            std::fs::write(&file, text).expect("write");
            assert_eq!(offset_in(&file), ms, "{text:?}");
        }
        std::fs::write(&file, i64::MAX.to_string()).expect("write");
        assert_eq!(offset_in(&file), OFFSET_MS_MAX);

        std::fs::write(&file, "60000").expect("write");
        let env = env_with_offset_file(file.clone()).expect("clock");
        let ahead = env.now_ms().saturating_sub(system_clock_ms());
        assert!((59_000..=61_000).contains(&ahead), "ahead by {ahead} ms");
        std::fs::write(&file, "-60000").expect("write");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while system_clock_ms().saturating_sub(env.now_ms()) < 59_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the new offset was never read"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
