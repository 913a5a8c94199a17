//! Who may call: principals with a role and namespaces, and their tokens,
//! stored hashed in the replicated state.
//!
//! A principal is a name (`alice`, `payments-agents`) with one [`Role`] and
//! the namespaces it was granted. A caller proves it is a principal with a
//! bearer token or with a client certificate naming it
//! (`fusebox://user/<name>`); the server does that, this module only keeps
//! the table and judges a presented token against it.
//!
//! - **Roles nest.** `reader` ⊂ `agent` ⊂ `operator` ⊂ `admin`: each has the
//!   rights of the one before plus its own, so "may this role call that
//!   RPC" is one comparison with the RPC's minimum role.
//! - **Tokens are stored hashed.** A token is `fbx_<id>_<secret>`: the id
//!   (16 hex digits) finds the record, and the SHA-256 of the secret (64
//!   hex digits, 256 random bits the server drew) must match its digest.
//!   The secret itself is never replicated, logged or stored.
//! - **Time is passed in.** Expiry is judged against the instant the caller
//!   gives (the serving node's wall clock); entries never read a clock.
//! - **Bounded.** At most [`PRINCIPALS_MAX`] principals, [`TOKENS_MAX`]
//!   tokens and [`GRANTED_NAMESPACES_MAX`] namespaces per principal.
//! - **No lock-out.** Enforcement cannot be switched on without an admin,
//!   and the last admin can never be removed or demoted (a node started
//!   with `--auth` enforces whatever the table says).

use crate::error::{check_len, CoreError};
use crate::limits::NAME_BYTES_MAX;
use crate::name::Namespace;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Principals the table holds at most.
pub const PRINCIPALS_MAX: usize = 1_024;
/// Tokens the table holds at most (expired ones are dropped to make room).
pub const TOKENS_MAX: usize = 4_096;
/// Namespaces one principal may be granted by name (or all of them).
pub const GRANTED_NAMESPACES_MAX: usize = 64;
/// The prefix every token starts with, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "fbx_";
/// Hex digits in a token id.
pub const TOKEN_ID_HEX: usize = 16;
/// Hex digits in a token secret (256 bits).
pub const TOKEN_SECRET_HEX: usize = 64;

/// What a principal may do; each role has the rights of the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Lists, shows and histories.
    Reader,
    /// A reader that also watches, reports outcomes, takes probes, writes
    /// the ledger (begin, complete, lookup) and emits disclosures.
    Agent,
    /// An agent that also steers breakers, resolves ledger records, applies
    /// and rolls back policy, imports tools and throws the kill switch.
    Operator,
    /// Everything, in every namespace: membership, leadership and auth.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 4] = [Role::Reader, Role::Agent, Role::Operator, Role::Admin];

    /// Parses `reader`, `agent`, `operator` or `admin`.
    pub fn parse(text: &str) -> Result<Role, CoreError> {
        Role::ALL
            .into_iter()
            .find(|role| role.name() == text)
            .ok_or_else(|| {
                CoreError::invalid(
                    "role",
                    format!("{text:?} is not reader, agent, operator or admin"),
                )
            })
    }

    /// The role's name as the API and the CLI spell it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Agent => "agent",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Whether this role has the rights of `needed`.
    pub fn covers(self, needed: Role) -> bool {
        self >= needed
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The namespaces a principal may touch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Grant {
    /// Every namespace, present and future (always so for an admin).
    All,
    /// These namespaces only.
    Only(BTreeSet<Namespace>),
}

impl Grant {
    /// Whether `ns` is granted.
    pub fn allows(&self, ns: &Namespace) -> bool {
        match self {
            Grant::All => true,
            Grant::Only(set) => set.contains(ns),
        }
    }

    /// A grant from names as the CLI takes them: `*` alone means all.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Grant, CoreError> {
        let mut set = BTreeSet::new();
        for name in names {
            if name == "*" {
                return Ok(Grant::All);
            }
            set.insert(Namespace::new(name)?);
        }
        Ok(Grant::Only(set))
    }

    /// The grant as names (`*` for all).
    pub fn names(&self) -> Vec<String> {
        match self {
            Grant::All => vec!["*".to_owned()],
            Grant::Only(set) => set.iter().map(ToString::to_string).collect(),
        }
    }

    fn check(&self, role: Role) -> Result<(), CoreError> {
        match self {
            Grant::All => Ok(()),
            Grant::Only(_) if role == Role::Admin => Err(CoreError::invalid(
                "namespaces",
                "an admin holds every namespace; grant \"*\"",
            )),
            Grant::Only(set) if set.is_empty() => Err(CoreError::invalid(
                "namespaces",
                "must name at least one namespace, or \"*\" for all",
            )),
            Grant::Only(set) if set.len() > GRANTED_NAMESPACES_MAX => Err(CoreError::invalid(
                "namespaces",
                format!("{} named, at most {GRANTED_NAMESPACES_MAX}", set.len()),
            )),
            Grant::Only(_) => Ok(()),
        }
    }
}

/// One principal: a role over some namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// What it may do.
    pub role: Role,
    /// Where.
    pub namespaces: Grant,
    /// Who granted it (the authenticated actor).
    pub granted_by: String,
    /// When, in the state's clock.
    pub granted_at: Timestamp,
}

/// One issued token, as stored: never the secret, only its digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The principal it proves.
    pub principal: String,
    /// SHA-256 of the secret.
    pub digest: [u8; 32],
    /// When it stops being accepted, if ever (Unix ms).
    pub expires_at: Option<Timestamp>,
    /// Who issued it.
    pub issued_by: String,
    /// When, in the state's clock.
    pub issued_at: Timestamp,
}

/// A change to the table, carried by [`crate::machine::Command::Auth`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthChange {
    /// Creates or replaces a principal (its tokens stay valid, with the new
    /// rights).
    Grant {
        /// The principal.
        name: String,
        /// Its role.
        role: Role,
        /// Its namespaces.
        namespaces: Grant,
    },
    /// Removes a principal and revokes its tokens.
    Remove {
        /// The principal.
        name: String,
    },
    /// Creates or replaces a principal, as `Grant`, and issues it a token,
    /// in one entry (so a token never exists for a principal that does not).
    IssueToken {
        /// The principal.
        name: String,
        /// Its role.
        role: Role,
        /// Its namespaces.
        namespaces: Grant,
        /// The token's id (16 lowercase hex digits, drawn by the server).
        token_id: String,
        /// SHA-256 of the token's secret.
        digest: [u8; 32],
        /// When it expires (Unix ms), if ever.
        expires_at: Option<Timestamp>,
        /// Also switch enforcement on, in the same entry (the first admin
        /// token: a leader change between two entries must not leave an
        /// admin and no enforcement).
        enable: bool,
    },
    /// Revokes one token.
    RevokeToken {
        /// The token's id.
        token_id: String,
    },
    /// Switches enforcement on or off cluster-wide.
    SetEnabled {
        /// Whether every call must authenticate.
        enabled: bool,
    },
}

impl AuthChange {
    /// Checks every field against its rule (the state is not consulted).
    pub fn validate(&self) -> Result<(), CoreError> {
        match self {
            AuthChange::Grant {
                name,
                role,
                namespaces,
            } => {
                check_principal_name(name)?;
                namespaces.check(*role)
            }
            AuthChange::Remove { name } => check_principal_name(name),
            AuthChange::IssueToken {
                name,
                role,
                namespaces,
                token_id,
                ..
            } => {
                check_principal_name(name)?;
                namespaces.check(*role)?;
                check_token_id(token_id)
            }
            AuthChange::RevokeToken { token_id } => check_token_id(token_id),
            AuthChange::SetEnabled { .. } => Ok(()),
        }
    }
}

/// A principal's name: 1..=128 bytes of printable ASCII without spaces or
/// `/`, as every other name.
pub fn check_principal_name(name: &str) -> Result<(), CoreError> {
    check_len("name", name, NAME_BYTES_MAX)?;
    if let Some(bad) = name.chars().find(|c| !c.is_ascii_graphic() || *c == '/') {
        return Err(CoreError::invalid(
            "name",
            format!("character {bad:?} not allowed (printable ASCII without spaces or '/')"),
        ));
    }
    Ok(())
}

fn check_token_id(id: &str) -> Result<(), CoreError> {
    if id.len() != TOKEN_ID_HEX || !is_lower_hex(id) {
        return Err(CoreError::invalid(
            "token_id",
            format!("must be {TOKEN_ID_HEX} lowercase hex digits"),
        ));
    }
    Ok(())
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A token as a caller presents it, split into its id and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct PresentedToken<'a> {
    /// The id that finds the record.
    pub id: &'a str,
    secret: &'a str,
}

impl fmt::Debug for PresentedToken<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PresentedToken({}, <secret>)", self.id)
    }
}

impl<'a> PresentedToken<'a> {
    /// Splits `fbx_<id>_<secret>`; `None` if it is not shaped so.
    pub fn parse(text: &'a str) -> Option<PresentedToken<'a>> {
        let rest = text.strip_prefix(TOKEN_PREFIX)?;
        let (id, secret) = rest.split_once('_')?;
        let shaped = id.len() == TOKEN_ID_HEX
            && secret.len() == TOKEN_SECRET_HEX
            && is_lower_hex(id)
            && is_lower_hex(secret);
        shaped.then_some(PresentedToken { id, secret })
    }

    /// The digest the table stores for this token's secret.
    pub fn digest(&self) -> [u8; 32] {
        secret_digest(self.secret)
    }
}

/// SHA-256 of a token secret, as stored.
pub fn secret_digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The text of a token from its id and secret.
pub fn token_text(id: &str, secret: &str) -> String {
    format!("{TOKEN_PREFIX}{id}_{secret}")
}

/// Why a presented token was not accepted (each is UNAUTHENTICATED; the
/// reason is for the server's log, the caller learns less).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenRefusal {
    /// Not `fbx_<id>_<secret>`.
    Malformed,
    /// No token with that id (never issued, revoked or its principal gone).
    Unknown,
    /// The secret does not match.
    WrongSecret,
    /// Past its expiry.
    Expired,
}

impl fmt::Display for TokenRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenRefusal::Malformed => "the token is not shaped fbx_<id>_<secret>",
            TokenRefusal::Unknown => "no such token (never issued, or revoked)",
            TokenRefusal::WrongSecret => "the token's secret does not match",
            TokenRefusal::Expired => "the token has expired",
        })
    }
}

/// The replicated table of principals and tokens.
///
/// The field order is the snapshot encoding's: do not reorder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthTable {
    enabled: bool,
    principals: BTreeMap<String, Principal>,
    tokens: BTreeMap<String, TokenRecord>,
    version: u64,
}

impl AuthTable {
    /// Whether the cluster requires every call to authenticate.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Grows with every change, so a reader can tell a new table cheaply.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A principal, by name.
    pub fn principal(&self, name: &str) -> Option<&Principal> {
        self.principals.get(name)
    }

    /// Every principal, in name order.
    pub fn principals(&self) -> impl Iterator<Item = (&String, &Principal)> {
        self.principals.iter()
    }

    /// The record of the token with `id`.
    pub fn token(&self, id: &str) -> Option<&TokenRecord> {
        self.tokens.get(id)
    }

    /// Every token record, in id order.
    pub fn tokens(&self) -> impl Iterator<Item = (&String, &TokenRecord)> {
        self.tokens.iter()
    }

    /// The principal a token proves at `now`, with its name.
    pub fn authenticate(
        &self,
        token: &str,
        now: Timestamp,
    ) -> Result<(&str, &Principal), TokenRefusal> {
        let presented = PresentedToken::parse(token).ok_or(TokenRefusal::Malformed)?;
        let record = self.tokens.get(presented.id).ok_or(TokenRefusal::Unknown)?;
        if !same_digest(&record.digest, &presented.digest()) {
            return Err(TokenRefusal::WrongSecret);
        }
        if record.expires_at.is_some_and(|at| at <= now) {
            return Err(TokenRefusal::Expired);
        }
        let (name, principal) = self
            .principals
            .get_key_value(&record.principal)
            .ok_or(TokenRefusal::Unknown)?;
        Ok((name.as_str(), principal))
    }

    /// Applies a validated change made by `actor` at `now`.
    pub(crate) fn apply(
        &mut self,
        change: &AuthChange,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), CoreError> {
        match change {
            AuthChange::Grant {
                name,
                role,
                namespaces,
            } => self.grant(name, *role, namespaces, actor, now)?,
            AuthChange::Remove { name } => self.remove(name)?,
            AuthChange::IssueToken {
                name,
                role,
                namespaces,
                token_id,
                digest,
                expires_at,
                enable,
            } => {
                if self.tokens.contains_key(token_id) {
                    return Err(CoreError::invalid("token_id", "already issued"));
                }
                self.make_token_room(now)?;
                self.grant(name, *role, namespaces, actor, now)?;
                self.tokens.insert(
                    token_id.clone(),
                    TokenRecord {
                        principal: name.clone(),
                        digest: *digest,
                        expires_at: *expires_at,
                        issued_by: actor.to_owned(),
                        issued_at: now,
                    },
                );
                self.enabled |= *enable;
            }
            AuthChange::RevokeToken { token_id } => {
                if self.tokens.remove(token_id).is_none() {
                    return Err(CoreError::not_found("token", token_id.clone()));
                }
            }
            AuthChange::SetEnabled { enabled } => {
                if *enabled && !self.has_admin() {
                    return Err(CoreError::invalid(
                        "enabled",
                        "no admin principal exists; issue an admin token first, or nobody could \
                         manage the cluster",
                    ));
                }
                self.enabled = *enabled;
            }
        }
        self.version += 1;
        Ok(())
    }

    fn grant(
        &mut self,
        name: &str,
        role: Role,
        namespaces: &Grant,
        actor: &str,
        now: Timestamp,
    ) -> Result<(), CoreError> {
        let was_admin = self.principals.get(name).map(|p| p.role) == Some(Role::Admin);
        if was_admin && role != Role::Admin && self.admins() == 1 {
            return Err(CoreError::invalid(
                "role",
                format!("{name} is the last admin; nobody could manage the cluster without one"),
            ));
        }
        if !self.principals.contains_key(name) && self.principals.len() >= PRINCIPALS_MAX {
            return Err(CoreError::limit("principals", PRINCIPALS_MAX));
        }
        self.principals.insert(
            name.to_owned(),
            Principal {
                role,
                namespaces: namespaces.clone(),
                granted_by: actor.to_owned(),
                granted_at: now,
            },
        );
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Result<(), CoreError> {
        let Some(principal) = self.principals.get(name) else {
            return Err(CoreError::not_found("principal", name));
        };
        if principal.role == Role::Admin && self.admins() == 1 {
            return Err(CoreError::invalid(
                "name",
                format!("{name} is the last admin; nobody could manage the cluster without one"),
            ));
        }
        self.principals.remove(name);
        self.tokens.retain(|_, token| token.principal != name);
        Ok(())
    }

    /// Drops tokens expired by `now` when the table is full.
    fn make_token_room(&mut self, now: Timestamp) -> Result<(), CoreError> {
        if self.tokens.len() < TOKENS_MAX {
            return Ok(());
        }
        self.tokens
            .retain(|_, token| token.expires_at.is_none_or(|at| at > now));
        if self.tokens.len() >= TOKENS_MAX {
            return Err(CoreError::limit("tokens", TOKENS_MAX));
        }
        Ok(())
    }

    fn admins(&self) -> usize {
        self.principals
            .values()
            .filter(|p| p.role == Role::Admin)
            .count()
    }

    /// Whether any principal is an admin.
    pub fn has_admin(&self) -> bool {
        self.admins() > 0
    }
}

/// Compares two digests in time that does not depend on where they differ.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn issue(table: &mut AuthTable, name: &str, role: Role, id: &str, expires: Option<u64>) {
        let namespaces = if role == Role::Admin {
            Grant::All
        } else {
            Grant::parse(["payments"]).unwrap_or(Grant::All)
        };
        let change = AuthChange::IssueToken {
            name: name.into(),
            role,
            namespaces,
            token_id: id.into(),
            digest: secret_digest(SECRET),
            expires_at: expires.map(Timestamp::from_millis),
            enable: false,
        };
        assert_eq!(change.validate(), Ok(()));
        assert_eq!(
            table.apply(&change, "root", Timestamp::from_millis(1)),
            Ok(())
        );
    }

    #[test]
    fn a_token_proves_its_principal_until_it_expires_or_is_revoked() {
        let mut table = AuthTable::default();
        issue(
            &mut table,
            "alice",
            Role::Agent,
            "00000000000000a1",
            Some(1_000),
        );
        let token = token_text("00000000000000a1", SECRET);
        let now = Timestamp::from_millis(999);
        let (name, principal) = table.authenticate(&token, now).expect("accepted");
        assert_eq!((name, principal.role), ("alice", Role::Agent));
        assert_eq!(
            table
                .authenticate(&token, Timestamp::from_millis(1_000))
                .err(),
            Some(TokenRefusal::Expired)
        );
        let wrong = token_text("00000000000000a1", &SECRET.replace('0', "1"));
        assert_eq!(
            table.authenticate(&wrong, now).err(),
            Some(TokenRefusal::WrongSecret)
        );
        assert_eq!(
            table.authenticate("Bearer nonsense", now).err(),
            Some(TokenRefusal::Malformed)
        );
        let revoke = AuthChange::RevokeToken {
            token_id: "00000000000000a1".into(),
        };
        assert_eq!(table.apply(&revoke, "root", now), Ok(()));
        assert_eq!(
            table.authenticate(&token, now).err(),
            Some(TokenRefusal::Unknown)
        );
    }

    #[test]
    fn removing_a_principal_revokes_its_tokens() {
        let mut table = AuthTable::default();
        issue(&mut table, "alice", Role::Agent, "00000000000000a1", None);
        let remove = AuthChange::Remove {
            name: "alice".into(),
        };
        assert_eq!(
            table.apply(&remove, "root", Timestamp::from_millis(2)),
            Ok(())
        );
        assert_eq!(table.tokens().count(), 0);
    }

    #[test]
    fn enforcement_needs_an_admin_and_keeps_the_last_one() {
        let mut table = AuthTable::default();
        let on = AuthChange::SetEnabled { enabled: true };
        let now = Timestamp::from_millis(3);
        assert!(table.apply(&on, "root", now).is_err());
        issue(&mut table, "root", Role::Admin, "00000000000000b1", None);
        assert_eq!(table.apply(&on, "root", now), Ok(()));
        let remove = AuthChange::Remove {
            name: "root".into(),
        };
        assert!(table.apply(&remove, "root", now).is_err());
        let demote = AuthChange::Grant {
            name: "root".into(),
            role: Role::Operator,
            namespaces: Grant::All,
        };
        assert!(table.apply(&demote, "root", now).is_err());
        assert!(table.enabled());
    }

    #[test]
    fn grants_are_checked_against_the_role() {
        let admin_narrow = AuthChange::Grant {
            name: "root".into(),
            role: Role::Admin,
            namespaces: Grant::parse(["a"]).unwrap_or(Grant::All),
        };
        assert!(admin_narrow.validate().is_err());
        let empty = AuthChange::Grant {
            name: "bob".into(),
            role: Role::Reader,
            namespaces: Grant::Only(BTreeSet::new()),
        };
        assert!(empty.validate().is_err());
        assert_eq!(Grant::parse(["a", "*"]), Ok(Grant::All));
        let bad_id = AuthChange::RevokeToken {
            token_id: "XYZ".into(),
        };
        assert!(bad_id.validate().is_err());
    }

    #[test]
    fn roles_nest() {
        assert!(Role::Admin.covers(Role::Operator));
        assert!(Role::Operator.covers(Role::Agent));
        assert!(Role::Agent.covers(Role::Reader));
        assert!(!Role::Reader.covers(Role::Agent));
        assert!(!Role::Operator.covers(Role::Admin));
        for role in Role::ALL {
            assert_eq!(Role::parse(role.name()), Ok(role));
        }
    }
}
