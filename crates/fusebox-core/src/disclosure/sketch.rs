//! A mergeable latency sketch: quantiles within 1% of the truth in bounded
//! memory, whatever the number of samples.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sketches_ddsketch::{Config, DDSketch};
use std::fmt;

use super::{SKETCH_BINS_MAX, SKETCH_RELATIVE_ACCURACY};

/// Smallest duration a bin tells apart from zero, in milliseconds; durations
/// are whole milliseconds, so anything below one is zero.
const SKETCH_MIN_VALUE_MS: f64 = 1.0e-9;

fn config() -> Config {
    Config::new(
        SKETCH_RELATIVE_ACCURACY,
        SKETCH_BINS_MAX,
        SKETCH_MIN_VALUE_MS,
    )
}

/// Observed call durations for one tool, as a DDSketch with 1% relative
/// accuracy.
///
/// Sketches from different reporters or time buckets merge exactly (the
/// merge of two sketches answers as the sketch of all their samples would),
/// which is what makes a fleet-wide view cheap. Every sketch shares one
/// configuration, so a merge cannot fail; a decoded sketch with another
/// configuration is refused at decoding.
///
/// Serialized form: `null` when empty (DDSketch marks "no minimum" with an
/// infinity, which JSON cannot carry), else the DDSketch's own serde form.
/// The same samples added in the same order give the same bytes.
#[derive(Clone)]
pub struct LatencySketch {
    inner: DDSketch,
}

impl Default for LatencySketch {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencySketch {
    /// An empty sketch.
    pub fn new() -> Self {
        LatencySketch {
            inner: DDSketch::new(config()),
        }
    }

    /// Records one call that took `duration_ms`.
    pub fn add(&mut self, duration_ms: u64) {
        self.add_many(duration_ms, 1);
    }

    /// Records `count` calls that each took `duration_ms`, in constant time
    /// (a report batch may carry pre-aggregated outcomes).
    pub fn add_many(&mut self, duration_ms: u64, count: u64) {
        // Precision loss above 2^53 ms (285 000 years) does not matter.
        self.inner.add_with_count(duration_ms as f64, count);
    }

    /// Folds `other`'s samples into this sketch.
    pub fn merge(&mut self, other: &LatencySketch) {
        let merged = self.inner.merge(&other.inner);
        // Every sketch is built with `config()` or checked against it when
        // decoded, so a configuration mismatch cannot happen.
        debug_assert!(merged.is_ok(), "latency sketches with different configs");
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.inner.count() as u64
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// The `q`-quantile (0 ≤ q ≤ 1) in whole milliseconds, within 1% of a
    /// recorded sample and never outside the recorded min and max; `None`
    /// when empty or when `q` is not in `[0, 1]`.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if !(0.0..=1.0).contains(&q) {
            return None;
        }
        let value = self.inner.quantile(q).ok().flatten()?;
        let (min, max) = (self.inner.min()?, self.inner.max()?);
        // Samples are non-negative integers, so the clamped value rounds
        // to one within [0, u64::MAX].
        Some(value.clamp(min, max).round() as u64)
    }

    /// The median, for human-readable expectations.
    pub fn p50(&self) -> Option<u64> {
        self.quantile(0.50)
    }

    /// The 95th percentile, the spec's routing and penalty figure.
    pub fn p95(&self) -> Option<u64> {
        self.quantile(0.95)
    }

    /// The 99th percentile, the spec's deadline figure.
    pub fn p99(&self) -> Option<u64> {
        self.quantile(0.99)
    }
}

impl fmt::Debug for LatencySketch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencySketch")
            .field("count", &self.count())
            .field("p50", &self.p50())
            .field("p95", &self.p95())
            .field("p99", &self.p99())
            .finish()
    }
}

impl PartialEq for LatencySketch {
    /// Equal when the serialized states are equal: the same bins, counts,
    /// min, max and sum. Costs a serialization of both; meant for tests and
    /// snapshot checks, not hot paths.
    fn eq(&self, other: &Self) -> bool {
        serde_json::to_vec(self).ok() == serde_json::to_vec(other).ok()
    }
}

impl Serialize for LatencySketch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (!self.is_empty())
            .then_some(&self.inner)
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for LatencySketch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Some(mut inner) = Option::<DDSketch>::deserialize(deserializer)? else {
            return Ok(Self::new());
        };
        let bins_max = 2 * SKETCH_BINS_MAX as usize;
        if inner.length() > bins_max {
            let message = format!(
                "latency sketch has {} bins, at most {bins_max} allowed",
                inner.length()
            );
            return Err(D::Error::custom(message));
        }
        // Merging an empty sketch changes nothing but checks the decoded
        // configuration against ours, which later merges rely on.
        if inner.merge(&DDSketch::new(config())).is_err() {
            return Err(D::Error::custom(
                "latency sketch has a foreign accuracy configuration",
            ));
        }
        if inner.count() == 0 {
            return Ok(Self::new());
        }
        Ok(LatencySketch { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic, skewed spread of latencies: mostly fast, long tail.
    fn samples(n: u64) -> Vec<u64> {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
                // Exponential-ish with a 200 ms mean, floor of 5 ms.
                5 + (-200.0 * (1.0 - unit).ln()) as u64
            })
            .collect()
    }

    fn exact(sorted: &[u64], q: f64) -> u64 {
        sorted[(q * (sorted.len() - 1) as f64) as usize]
    }

    fn sketch_of(values: &[u64]) -> LatencySketch {
        let mut s = LatencySketch::new();
        values.iter().for_each(|v| s.add(*v));
        s
    }

    #[test]
    fn quantiles_are_within_two_percent_of_exact() {
        let values = samples(20_000);
        let sketch = sketch_of(&values);
        let mut sorted = values.clone();
        sorted.sort_unstable();
        for q in [0.01, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999] {
            let (got, want) = (sketch.quantile(q).expect("non-empty"), exact(&sorted, q));
            let err = (got as f64 - want as f64).abs() / want as f64;
            assert!(err <= 0.02, "q={q}: sketch {got} vs exact {want} ({err})");
        }
        assert_eq!(sketch.count(), 20_000);
    }

    #[test]
    fn a_constant_latency_is_reported_exactly() {
        let sketch = sketch_of(&[250; 500]);
        assert_eq!(
            (sketch.p50(), sketch.p95(), sketch.p99()),
            (Some(250), Some(250), Some(250))
        );
    }

    #[test]
    fn merge_equals_the_sketch_of_all_samples() {
        let values = samples(10_000);
        let (left, right) = values.split_at(3_700);
        let mut merged = sketch_of(left);
        merged.merge(&sketch_of(right));
        let whole = sketch_of(&values);
        assert_eq!(merged.count(), whole.count());
        for q in [0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0] {
            assert_eq!(merged.quantile(q), whole.quantile(q), "q={q}");
        }
    }

    #[test]
    fn empty_and_out_of_range_quantiles_are_none() {
        let empty = LatencySketch::new();
        assert_eq!((empty.count(), empty.p50()), (0, None));
        let one = sketch_of(&[10]);
        assert_eq!((one.quantile(-0.1), one.quantile(1.5)), (None, None));
        assert_eq!(one.quantile(1.0), Some(10));
    }

    #[test]
    fn same_inputs_give_the_same_bytes_and_round_trip() {
        let values = samples(5_000);
        let (a, b) = (sketch_of(&values), sketch_of(&values));
        let bytes = serde_json::to_vec(&a).expect("encode");
        assert_eq!(bytes, serde_json::to_vec(&b).expect("encode"));
        let back: LatencySketch = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(serde_json::to_vec(&back).expect("encode"), bytes);
        assert_eq!(back.p99(), a.p99());
        let packed = postcard::to_allocvec(&a).expect("pack");
        let unpacked: LatencySketch = postcard::from_bytes(&packed).expect("unpack");
        assert_eq!(unpacked, a);
    }

    #[test]
    fn an_empty_sketch_round_trips_through_json() {
        let json = serde_json::to_string(&LatencySketch::new()).expect("encode");
        assert_eq!(json, "null");
        let back: Result<LatencySketch, _> = serde_json::from_str(&json);
        assert!(back.is_ok_and(|s| s.is_empty()));
    }

    #[test]
    fn a_foreign_configuration_is_refused() {
        let mut foreign = DDSketch::new(Config::new(0.05, 512, 1.0e-9));
        foreign.add(10.0);
        let json = serde_json::to_string(&foreign).expect("encode");
        let back: Result<LatencySketch, _> = serde_json::from_str(&json);
        assert!(back.is_err_and(|e| e.to_string().contains("foreign accuracy configuration")));
    }
}
