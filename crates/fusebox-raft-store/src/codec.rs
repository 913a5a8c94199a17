//! How keys and values are laid out on disk.
//!
//! Log keys are the entry index as 8 big-endian bytes, so RocksDB's byte
//! order is index order and a range of indexes is a range of keys.
//!
//! Every value is one format byte ([`VALUE_FORMAT`]) followed by the postcard
//! encoding of the value. The format byte lets a later build change the
//! encoding and still read old data; an unknown format byte, a truncated or
//! over-long body, or bytes that do not decode are all reported as
//! `io::ErrorKind::InvalidData` naming what was read, never a panic.
//!
//! Postcard is not self-describing, so it cannot encode types that rely on
//! `skip_serializing_if`, `untagged` or `flatten`. The openraft types we store
//! (entries, votes, log ids, snapshot metadata) use none of them, and the
//! core's command types travel in a compact form of their own (a policy
//! document is its TOML text); the round-trip tests below pin this.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io;

/// The format byte of every value this build writes.
///
/// 2: commands gained `ReportBatch` and a policy change's reason, which
/// changes postcard's positional encoding; a store written by a format-1
/// build is refused by name instead of failing to decode.
///
/// 3: a member carries its peer address besides its API address, and the
/// state's clock the stamp it last followed.
///
/// 4: commands gained `Auth`, and the state its table of principals and
/// hashed tokens.
///
/// 5: commands gained `DeleteNamespace`, and disabling a breaker or putting
/// it in metrics-only takes an optional period, as forcing it open does.
///
/// Still 5: commands gained `LedgerBatch` as their last variant, which
/// leaves every earlier encoding as it was, so this build reads format-5
/// stores; a build without it cannot read an entry that holds one (every
/// node of a cluster runs the same build).
pub const VALUE_FORMAT: u8 = 5;

/// The key of log entry `index`.
pub(crate) fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The index a log key stands for.
pub(crate) fn key_index(key: &[u8]) -> io::Result<u64> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| {
        corrupt(format_args!(
            "log key of {} bytes, expected 8: {key:02x?}",
            key.len()
        ))
    })?;
    Ok(u64::from_be_bytes(bytes))
}

/// Encodes a value with its format byte.
pub fn encode<T: Serialize>(what: &str, value: &T) -> io::Result<Vec<u8>> {
    let mut bytes = vec![VALUE_FORMAT];
    let body = postcard::to_allocvec(value)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("encode {what}: {e}")))?;
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// Decodes a value written by [`encode`]; `what` names it in the error.
pub fn decode<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> io::Result<T> {
    let Some((&format, body)) = bytes.split_first() else {
        return Err(corrupt(format_args!("{what}: empty value")));
    };
    if format != VALUE_FORMAT {
        return Err(corrupt(format_args!(
            "{what}: value format {format} unknown, this build reads {VALUE_FORMAT}"
        )));
    }
    let (value, rest) = postcard::take_from_bytes::<T>(body)
        .map_err(|e| corrupt(format_args!("{what}: undecodable value: {e}")))?;
    if !rest.is_empty() {
        return Err(corrupt(format_args!(
            "{what}: {} trailing bytes after the value",
            rest.len()
        )));
    }
    Ok(value)
}

/// An error for data on disk that is not what this build wrote.
pub(crate) fn corrupt(message: std::fmt::Arguments<'_>) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("corrupt raft store: {message}"),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::types::{Entry, LogId, Request, SnapshotMeta, StoredMembership, Vote};
    use crate::Member;
    use fusebox_core::machine::Command;
    use fusebox_core::policy::PolicyDocument;
    use fusebox_core::Namespace;
    use openraft::entry::RaftEntry;
    use openraft::Membership;
    use std::collections::{BTreeMap, BTreeSet};

    fn log_id(term: u64, index: u64) -> LogId {
        openraft::testing::log_id::<crate::TypeConfig>(term, 1, index)
    }

    fn membership() -> Membership<u64, Member> {
        let voters = BTreeSet::from([1, 2, 3]);
        let nodes = BTreeMap::from([
            (1, Member::new("10.0.0.1:7000", "10.0.0.1:7100")),
            (2, Member::new("10.0.0.2:7000", "10.0.0.2:7100")),
            (3, Member::new("10.0.0.3:7000", "10.0.0.3:7100")),
            (4, Member::new("10.0.0.4:7000", "10.0.0.4:7100")),
        ]);
        Membership::new(vec![voters], nodes).unwrap()
    }

    fn policy_document() -> PolicyDocument {
        let text = "[defaults]\ntimeout_ms = 1500\n";
        toml_document(text)
    }

    fn toml_document(text: &str) -> PolicyDocument {
        PolicyDocument::parse(text, fusebox_core::policy::PolicyFormat::Toml).unwrap()
    }

    fn round_trip<T>(value: &T) -> T
    where
        T: Serialize + DeserializeOwned,
    {
        let bytes = encode("value", value).unwrap();
        decode("value", &bytes).unwrap()
    }

    #[test]
    fn entries_of_every_payload_round_trip() {
        let entries = vec![
            Entry::new_blank(log_id(1, 1)),
            Entry::new_membership(log_id(1, 2), membership()),
            Entry::new_normal(
                log_id(2, 3),
                Request::new(
                    1_700_000_000_000,
                    Command::ApplyPolicy {
                        namespace: Namespace::new("fleet-a").unwrap(),
                        document: Box::new(policy_document()),
                        actor: "ops".into(),
                        reason: "raise timeouts".into(),
                    },
                ),
            ),
            Entry::new_normal(log_id(2, 4), Request::new(7, Command::Tick)),
        ];
        for entry in &entries {
            assert_eq!(&round_trip(entry), entry);
        }
    }

    #[test]
    fn votes_log_ids_and_snapshot_meta_round_trip() {
        let vote = Vote::new_committed(3, 2);
        assert_eq!(round_trip(&vote), vote);
        let committed: Option<LogId> = Some(log_id(3, 9));
        assert_eq!(round_trip(&committed), committed);
        let meta = SnapshotMeta {
            last_log_id: Some(log_id(3, 9)),
            last_membership: StoredMembership::new(Some(log_id(1, 2)), membership()),
        };
        assert_eq!(round_trip(&meta), meta);
        assert_eq!(
            round_trip(&SnapshotMeta::default()),
            SnapshotMeta::default()
        );
    }

    #[test]
    fn corrupt_values_are_errors() {
        let good = encode("vote", &Vote::new(1, 1)).unwrap();
        let mut unknown_format = good.clone();
        unknown_format[0] = 9;
        let mut trailing = good.clone();
        trailing.push(0);
        let truncated = &good[..good.len() - 1];
        for bad in [
            &[][..],
            &unknown_format,
            &trailing,
            truncated,
            &[1, 0xff, 0xff],
        ] {
            let err = decode::<Vote>("vote", bad).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{bad:?}: {err}");
        }
    }

    #[test]
    fn keys_sort_by_index() {
        assert!(index_key(255) < index_key(256));
        assert_eq!(key_index(&index_key(42)).unwrap(), 42);
        assert!(key_index(&[1, 2, 3]).is_err());
    }
}
