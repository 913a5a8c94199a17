//! Between the wire and the core: validation of every request field, and
//! rendering of core values as `fusebox.v1` messages.
//!
//! Conversions *from* the wire return `Result<_, Status>`: a field that
//! breaks a rule is an INVALID_ARGUMENT naming that field (as the request
//! spells it, e.g. `outcomes[3].server`). Conversions *to* the wire cannot
//! fail. One file per area; the shared field checks live here.

pub mod auth;
pub mod breakers;
pub mod ledger;
pub mod operator;
pub mod outcomes;
pub mod policy;
pub mod tools;

use crate::caller::Caller;
use crate::limits::{
    LIST_LIMIT_DEFAULT, META_ATTRIBUTES_MAX, META_ATTRIBUTE_BYTES_MAX, PAGE_BYTES_MAX,
};
use crate::status;
use fusebox_core::limits::{ID_BYTES_MAX, LIST_LIMIT_MAX};
use fusebox_core::{CoreError, Namespace};
use fusebox_proto::v1::RequestMeta;
use tonic::Status;

/// The request's namespace, validated.
pub fn namespace(value: &str) -> Result<Namespace, Status> {
    name("namespace", value, Namespace::new)
}

/// A validated name, with errors reported under `field`.
pub fn name<T>(
    field: &str,
    value: &str,
    make: impl FnOnce(String) -> Result<T, CoreError>,
) -> Result<T, Status> {
    name_at(|| field.to_owned(), value, make)
}

/// [`name`] for a field whose name is built (`outcomes[3].tool`): built
/// only for an error, not for every name that is valid.
pub fn name_at<T>(
    field: impl FnOnce() -> String,
    value: &str,
    make: impl FnOnce(String) -> Result<T, CoreError>,
) -> Result<T, Status> {
    make(value.to_owned()).map_err(|e| match e {
        CoreError::InvalidField { reason, .. } => status::invalid_field(&field(), &reason),
        other => status::from_core(&other),
    })
}

/// A non-empty text of at most `max` bytes.
pub fn required(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.is_empty() {
        return Err(status::invalid_field(field, "must not be empty"));
    }
    bounded(field, value, max)
}

/// A text of at most `max` bytes (empty allowed).
pub fn bounded(field: &str, value: &str, max: usize) -> Result<(), Status> {
    if value.len() > max {
        let reason = format!("is {} bytes, at most {max} allowed", value.len());
        return Err(status::invalid_field(field, &reason));
    }
    Ok(())
}

/// Checks the caller metadata against its bounds (it ends up in logs and
/// audit entries, so it may not grow without limit).
pub fn meta(meta: Option<&RequestMeta>) -> Result<(), Status> {
    let Some(meta) = meta else {
        return Ok(());
    };
    bounded("meta.caller", &meta.caller, ID_BYTES_MAX)?;
    bounded("meta.request_id", &meta.request_id, ID_BYTES_MAX)?;
    if meta.attributes.len() > META_ATTRIBUTES_MAX {
        let reason = format!(
            "has {} entries, at most {META_ATTRIBUTES_MAX} allowed",
            meta.attributes.len()
        );
        return Err(status::invalid_argument(
            "meta.attributes",
            "max_entries",
            reason,
        ));
    }
    for (key, value) in &meta.attributes {
        required("meta.attributes", key, META_ATTRIBUTE_BYTES_MAX)?;
        bounded(
            &format!("meta.attributes.{key}"),
            value,
            META_ATTRIBUTE_BYTES_MAX,
        )?;
    }
    Ok(())
}

/// Who acts: the authenticated caller's name; for an anonymous caller (a
/// cluster without auth), the request's own actor field, else the caller
/// named in its metadata, one of them required. An authenticated caller
/// cannot claim another name.
pub fn actor(
    caller: &Caller,
    explicit: &str,
    meta: Option<&RequestMeta>,
) -> Result<String, Status> {
    if let Some(name) = &caller.name {
        return Ok(name.clone());
    }
    let caller = meta.map_or("", |m| m.caller.as_str());
    let actor = if explicit.is_empty() {
        caller
    } else {
        explicit
    };
    if actor.is_empty() {
        return Err(status::invalid_argument(
            "actor",
            "required",
            "must name the operator (set actor, or meta.caller)",
        ));
    }
    bounded("actor", actor, ID_BYTES_MAX)?;
    Ok(actor.to_owned())
}

/// Keeps the leading entries whose encodings add up to at most
/// [`PAGE_BYTES_MAX`], always at least one; whether any were cut.
pub fn cut_to_page_bytes<T: prost::Message>(entries: &mut Vec<T>) -> bool {
    let mut total = 0usize;
    let keep = entries
        .iter()
        .position(|entry| {
            total = total.saturating_add(entry.encoded_len());
            total > PAGE_BYTES_MAX
        })
        .map_or(entries.len(), |first_over| first_over.max(1));
    let cut = keep < entries.len();
    entries.truncate(keep);
    cut
}

/// A page size: 0 means the default, and every size is capped.
pub fn page_limit(limit: u32) -> usize {
    match usize::try_from(limit) {
        Ok(0) => LIST_LIMIT_DEFAULT,
        Ok(n) => n.min(LIST_LIMIT_MAX),
        Err(_) => LIST_LIMIT_MAX,
    }
}

/// A decimal page token (a version or generation to continue below).
pub fn number_token(field: &str, token: &str) -> Result<Option<u64>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    token.parse().map(Some).map_err(|_| {
        status::invalid_argument(field, "page_token", "is not a token this server issued")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn names_are_reported_under_the_request_field() {
        let err = name("outcomes[2].server", "a b", fusebox_core::ServerName::new)
            .err()
            .map(|s| s.message().to_owned())
            .unwrap_or_default();
        assert!(err.starts_with("invalid outcomes[2].server"), "{err}");
    }

    #[test]
    fn pages_are_cut_by_bytes_but_never_empty() {
        let big = |n: usize| RequestMeta {
            caller: "x".repeat(n),
            ..Default::default()
        };
        let mut one_huge = vec![big(PAGE_BYTES_MAX + 10), big(1)];
        assert!(cut_to_page_bytes(&mut one_huge));
        assert_eq!(one_huge.len(), 1, "the first entry is always sent");
        let third = PAGE_BYTES_MAX / 3;
        let mut thirds = vec![big(third), big(third), big(third), big(third)];
        assert!(cut_to_page_bytes(&mut thirds));
        assert_eq!(thirds.len(), 2);
        let mut small = vec![big(10), big(10)];
        assert!(!cut_to_page_bytes(&mut small));
        assert_eq!(small.len(), 2);
    }

    #[test]
    fn actor_falls_back_to_the_caller() {
        let meta = RequestMeta {
            caller: "ops-console".into(),
            ..Default::default()
        };
        let open = Caller::open();
        assert_eq!(
            actor(&open, "", Some(&meta)).ok().as_deref(),
            Some("ops-console")
        );
        assert_eq!(
            actor(&open, "alice", Some(&meta)).ok().as_deref(),
            Some("alice")
        );
        let alice = Caller {
            name: Some("alice".into()),
            ..Caller::open()
        };
        assert_eq!(
            actor(&alice, "mallory", Some(&meta)).ok().as_deref(),
            Some("alice")
        );
        assert_eq!(
            actor(&open, "", None).err().map(|s| s.code()),
            Some(Code::InvalidArgument)
        );
    }

    #[test]
    fn page_limits_default_and_cap() {
        assert_eq!(page_limit(0), LIST_LIMIT_DEFAULT);
        assert_eq!(page_limit(7), 7);
        assert_eq!(page_limit(u32::MAX), LIST_LIMIT_MAX);
    }
}
