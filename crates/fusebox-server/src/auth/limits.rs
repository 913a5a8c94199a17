//! Per-caller bounds: a request rate and a number of open watch streams.
//!
//! A caller is its principal's name, or, unauthenticated, its address
//! (`a:IP`; a principal's key is `p:NAME`). Each has a token bucket ([`CallerLimits::requests_per_second`]
//! refilled continuously, up to [`CallerLimits::burst`]) and a count of
//! open watch streams ([`CallerLimits::watch_streams`]). Over either, a call
//! is refused with RESOURCE_EXHAUSTED and a `RateLimitedDetail` saying when
//! to try again. Raft traffic and health checks are never metered.
//!
//! The meter itself is bounded: at most [`CALLERS_METERED_MAX`] buckets. When
//! full, buckets that have refilled (idle callers) are dropped; if none has,
//! new callers share one overflow bucket, so a flood of new identities
//! cannot grow memory, only slow each other down.

use crate::api::status;
pub use fusebox_api::config::CallerLimits;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::time::Instant;
use tonic::Status;

/// Callers with a bucket of their own, at most.
pub const CALLERS_METERED_MAX: usize = 16_384;

/// The key new callers share when the meter is full of busy ones.
const OVERFLOW: &str = "-overflow";

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The node's per-caller meter.
#[derive(Debug)]
pub struct Meter {
    limits: CallerLimits,
    buckets: Mutex<BTreeMap<String, Bucket>>,
    streams: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl Meter {
    /// A meter enforcing `limits`.
    pub fn new(limits: CallerLimits) -> Meter {
        Meter {
            limits,
            buckets: Mutex::new(BTreeMap::new()),
            streams: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// Takes one request from `caller`'s bucket, or says when to retry.
    pub fn request(&self, caller: &str, now: Instant) -> Result<(), Status> {
        let rate = f64::from(self.limits.requests_per_second);
        let burst = f64::from(self.limits.burst);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let key = if buckets.contains_key(caller) || room(&mut buckets, rate, burst, now) {
            caller
        } else {
            OVERFLOW
        };
        // A known caller's bucket is found by reference: the key is copied
        // only for a new one (this runs on every call).
        if let Some(bucket) = buckets.get_mut(key) {
            return self.take(caller, bucket, now);
        }
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        self.take(caller, bucket, now)
    }

    /// Takes one request from `bucket`, `caller`'s, refilled to `now`.
    fn take(&self, caller: &str, bucket: &mut Bucket, now: Instant) -> Result<(), Status> {
        let rate = f64::from(self.limits.requests_per_second);
        let burst = f64::from(self.limits.burst);
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait_ms = ((1.0 - bucket.tokens) / rate * 1000.0).ceil().max(1.0);
        // At most `1000 / rate` ms, so the cast cannot overflow.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let retry_after_ms = wait_ms as u64;
        tracing::debug!(
            caller,
            retry_after_ms,
            "request over the caller's rate refused"
        );
        Err(status::rate_limited(
            "caller_requests_per_second",
            retry_after_ms,
            format!(
                "{caller} sends more than {} requests per second; retry in {retry_after_ms} ms",
                self.limits.requests_per_second
            ),
        ))
    }

    /// A slot for one more open watch stream of `caller`, freed when the
    /// permit (and every clone of it) is dropped.
    pub fn stream(&self, caller: &str) -> Result<StreamPermit, Status> {
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        let open = streams.entry(caller.to_owned()).or_insert(0);
        if *open >= self.limits.watch_streams {
            let max = self.limits.watch_streams;
            tracing::debug!(caller, max, "watch stream over the caller's bound refused");
            return Err(status::rate_limited(
                "caller_watch_streams",
                1_000,
                format!(
                    "{caller} holds {max} watch streams already, the most one caller may; \
                     close one (one per replica and namespace is enough)"
                ),
            ));
        }
        *open += 1;
        Ok(StreamPermit {
            _slot: Arc::new(Slot {
                caller: caller.to_owned(),
                streams: Arc::clone(&self.streams),
            }),
        })
    }

    /// Watch streams `caller` holds open now.
    pub fn open_streams(&self, caller: &str) -> u32 {
        let streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        streams.get(caller).copied().unwrap_or(0)
    }
}

/// Makes room for one more bucket if the meter is full: drops buckets that
/// have refilled (callers idle for a whole burst's worth of time). False if
/// every bucket is busy.
fn room(buckets: &mut BTreeMap<String, Bucket>, rate: f64, burst: f64, now: Instant) -> bool {
    if buckets.len() < CALLERS_METERED_MAX {
        return true;
    }
    buckets.retain(|_, b| {
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens + elapsed * rate < burst
    });
    buckets.len() < CALLERS_METERED_MAX
}

/// One open watch stream's slot; travels in the request's extensions to
/// the stream's task.
#[derive(Clone, Debug)]
pub struct StreamPermit {
    /// Held for its `Drop`, which frees the slot.
    _slot: Arc<Slot>,
}

#[derive(Debug)]
struct Slot {
    caller: String,
    streams: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(open) = streams.get_mut(&self.caller) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                streams.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn meter(rate: u32, burst: u32, streams: u32) -> Meter {
        Meter::new(CallerLimits {
            requests_per_second: rate,
            burst,
            watch_streams: streams,
        })
    }

    #[test]
    fn a_caller_gets_its_burst_then_its_rate() {
        let meter = meter(10, 3, 1);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(meter.request("alice", t0).is_ok());
        }
        let refused = meter.request("alice", t0).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        let detail = status::detail_of(&refused).unwrap();
        assert_eq!(detail.code(), fusebox_proto::v1::ErrorCode::RateLimited);
        // Another caller has its own bucket.
        assert!(meter.request("bob", t0).is_ok());
        // A tenth of a second refills one request at 10 per second.
        assert!(meter
            .request("alice", t0 + Duration::from_millis(100))
            .is_ok());
        assert!(meter
            .request("alice", t0 + Duration::from_millis(100))
            .is_err());
    }

    #[test]
    fn stream_slots_free_when_the_last_permit_drops() {
        let meter = meter(10, 10, 2);
        let a = meter.stream("alice").unwrap();
        let b = meter.stream("alice").unwrap();
        assert!(meter.stream("alice").is_err());
        let a2 = a.clone();
        drop(a);
        assert!(
            meter.stream("alice").is_err(),
            "a clone still holds the slot"
        );
        drop(a2);
        let c = meter.stream("alice").unwrap();
        assert_eq!(meter.open_streams("alice"), 2);
        drop((b, c));
        assert_eq!(meter.open_streams("alice"), 0);
    }

    #[test]
    fn a_full_meter_drops_idle_callers_and_shares_an_overflow_bucket() {
        let meter = meter(1, 1, 1);
        let t0 = Instant::now();
        for i in 0..CALLERS_METERED_MAX {
            assert!(meter.request(&format!("c{i}"), t0).is_ok());
        }
        // Every bucket is empty (busy): a new caller shares the overflow.
        assert!(meter.request("new-1", t0).is_ok());
        assert!(meter.request("new-2", t0).is_err());
        // A second later every bucket has refilled: room again.
        let later = t0 + Duration::from_secs(2);
        assert!(meter.request("new-3", later).is_ok());
        let held = meter
            .buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        assert!(held <= CALLERS_METERED_MAX);
    }
}
