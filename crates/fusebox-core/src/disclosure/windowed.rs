//! A rolling window of latency: a fixed ring of time buckets, each its own
//! sketch, so old samples fall out as time moves on without being stored
//! one by one.

use serde::{Deserialize, Serialize};

use super::sketch::LatencySketch;
use super::WINDOW_BUCKETS_MAX;
use crate::error::CoreError;
use crate::time::Timestamp;

/// One bucket of the ring: the samples of one `bucket_ms`-wide slice of time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Bucket {
    /// Which slice: `timestamp_ms / bucket_ms` of its samples.
    epoch: u64,
    /// The slice's samples.
    sketch: LatencySketch,
}

/// Latency observed over the last `window_ms`, at bucket granularity.
///
/// The window is split into `n` buckets of `bucket_ms`; a sample stamped
/// `now` lands in bucket `now / bucket_ms`, stored in ring slot
/// `epoch % n`. A slot holding an older epoch is reset before reuse, so
/// memory is `n` sketches whatever the traffic, and time only enters as the
/// values passed in. [`WindowedSketch::merged`] at `now` covers the `n`
/// buckets ending with `now`'s: between `window_ms - bucket_ms` and
/// `window_ms` of history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "WindowedSketchWire")]
pub struct WindowedSketch {
    bucket_ms: u64,
    buckets: Vec<Bucket>,
}

/// The serialized form, checked before it becomes a [`WindowedSketch`] so a
/// damaged snapshot cannot break the ring's arithmetic.
#[derive(Deserialize)]
struct WindowedSketchWire {
    bucket_ms: u64,
    buckets: Vec<Bucket>,
}

impl TryFrom<WindowedSketchWire> for WindowedSketch {
    type Error = String;

    fn try_from(wire: WindowedSketchWire) -> Result<Self, String> {
        let n = wire.buckets.len();
        if wire.bucket_ms == 0 || n == 0 || n > WINDOW_BUCKETS_MAX {
            return Err(format!(
                "windowed sketch needs bucket_ms > 0 and 1 to {WINDOW_BUCKETS_MAX} buckets, \
                 has bucket_ms {} and {n} buckets",
                wire.bucket_ms
            ));
        }
        let misplaced = wire
            .buckets
            .iter()
            .enumerate()
            .any(|(slot, b)| b.epoch % n as u64 != slot as u64);
        if misplaced {
            return Err("windowed sketch has a bucket in the wrong ring slot".to_string());
        }
        Ok(WindowedSketch {
            bucket_ms: wire.bucket_ms,
            buckets: wire.buckets,
        })
    }
}

impl WindowedSketch {
    /// A window of `window_ms` split into `bucket_count` equal buckets; more
    /// buckets forget more smoothly, fewer cost less memory.
    pub fn new(window_ms: u64, bucket_count: usize) -> Result<Self, CoreError> {
        if bucket_count == 0 || bucket_count > WINDOW_BUCKETS_MAX {
            return Err(CoreError::invalid(
                "bucket_count",
                format!("is {bucket_count}, must be 1 to {WINDOW_BUCKETS_MAX}"),
            ));
        }
        let n = bucket_count as u64;
        if window_ms == 0 || !window_ms.is_multiple_of(n) {
            return Err(CoreError::invalid(
                "window_ms",
                format!("is {window_ms}, must be a positive multiple of {bucket_count} buckets"),
            ));
        }
        let buckets = (0..n)
            .map(|epoch| Bucket {
                epoch,
                sketch: LatencySketch::new(),
            })
            .collect();
        Ok(WindowedSketch {
            bucket_ms: window_ms / n,
            buckets,
        })
    }

    /// The window's width in milliseconds.
    pub fn window_ms(&self) -> u64 {
        self.bucket_ms * self.buckets.len() as u64
    }

    /// Width of one bucket, the granularity at which samples expire.
    pub fn bucket_ms(&self) -> u64 {
        self.bucket_ms
    }

    fn epoch(&self, at: Timestamp) -> u64 {
        at.as_millis() / self.bucket_ms
    }

    /// Records a call that took `duration_ms` and finished at `now`. Returns
    /// false, recording nothing, when `now` is so far behind the newest
    /// sample that its bucket has already been reused.
    pub fn record(&mut self, now: Timestamp, duration_ms: u64) -> bool {
        let epoch = self.epoch(now);
        let n = self.buckets.len() as u64;
        let bucket = &mut self.buckets[(epoch % n) as usize];
        if bucket.epoch > epoch {
            return false;
        }
        if bucket.epoch < epoch {
            bucket.epoch = epoch;
            bucket.sketch = LatencySketch::new();
        }
        bucket.sketch.add(duration_ms);
        debug_assert_eq!(bucket.epoch % n, epoch % n, "bucket left its ring slot");
        true
    }

    /// The samples of the `n` buckets ending with `now`'s, merged; buckets
    /// older than that are ignored (and reused on the next record), buckets
    /// stamped after `now` are not part of the window ending at `now`.
    pub fn merged(&self, now: Timestamp) -> LatencySketch {
        let now_epoch = self.epoch(now);
        let n = self.buckets.len() as u64;
        let mut merged = LatencySketch::new();
        self.buckets
            .iter()
            .filter(|b| b.epoch <= now_epoch && b.epoch.saturating_add(n) > now_epoch)
            .for_each(|b| merged.merge(&b.sketch));
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE_MS: u64 = 60_000;

    fn at(minutes: u64) -> Timestamp {
        Timestamp::from_millis(minutes * MINUTE_MS)
    }

    fn window() -> WindowedSketch {
        // Ten minutes in ten one-minute buckets.
        WindowedSketch::new(10 * MINUTE_MS, 10).expect("valid geometry")
    }

    #[test]
    fn old_samples_are_forgotten_as_time_moves() {
        let mut w = window();
        for _ in 0..100 {
            assert!(w.record(at(0), 1_000));
        }
        for _ in 0..100 {
            assert!(w.record(at(5), 10));
        }
        assert_eq!(w.merged(at(9)).count(), 200);
        assert_eq!(w.merged(at(9)).p99(), Some(1_000));
        // At minute 10 the minute-0 bucket has left the window.
        assert_eq!(w.merged(at(10)).count(), 100);
        assert_eq!(w.merged(at(10)).p99(), Some(10));
        assert_eq!(w.merged(at(15)).count(), 0);
    }

    #[test]
    fn a_reused_slot_starts_empty_and_late_samples_are_refused() {
        let mut w = window();
        assert!(w.record(at(1), 500));
        assert!(w.record(at(11), 20)); // same slot, ten minutes later
        assert_eq!(w.merged(at(11)).count(), 1);
        assert_eq!(w.merged(at(11)).p50(), Some(20));
        assert!(!w.record(at(1), 500), "minute 1 is gone for good");
        assert_eq!(w.merged(at(11)).count(), 1);
    }

    #[test]
    fn samples_after_now_are_outside_the_window() {
        let mut w = window();
        assert!(w.record(at(7), 30));
        assert_eq!(w.merged(at(6)).count(), 0);
        assert_eq!(w.merged(at(7)).count(), 1);
    }

    #[test]
    fn geometry_is_checked() {
        assert!(WindowedSketch::new(0, 4).is_err());
        assert!(WindowedSketch::new(1_000, 0).is_err());
        assert!(WindowedSketch::new(1_001, 4).is_err());
        assert!(WindowedSketch::new(64_000, WINDOW_BUCKETS_MAX + 1).is_err());
        let w = window();
        assert_eq!((w.window_ms(), w.bucket_ms()), (10 * MINUTE_MS, MINUTE_MS));
    }

    #[test]
    fn round_trips_through_json_and_refuses_a_broken_ring() {
        let mut w = window();
        (0..30).for_each(|m| {
            w.record(at(m), 100 + m);
        });
        let json = serde_json::to_string(&w).expect("encode");
        let back: Result<WindowedSketch, _> = serde_json::from_str(&json);
        assert_eq!(back.as_ref().ok(), Some(&w));
        let broken = json.replacen("\"bucket_ms\":60000", "\"bucket_ms\":0", 1);
        assert!(serde_json::from_str::<WindowedSketch>(&broken).is_err());
    }
}
