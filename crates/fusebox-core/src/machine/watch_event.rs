//! What a command changed, as watch streams carry it.

use crate::breaker::{BreakerKey, BreakerView};
use crate::name::{Namespace, ServerName, ToolName};
use serde::{Deserialize, Serialize};

/// What changed, for watch streams; each carries the revision it created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchEvent {
    /// A breaker changed state (its generation grew).
    Breaker {
        /// The revision of this change.
        revision: u64,
        /// The breaker after the change.
        view: BreakerView,
    },
    /// A namespace's policy version changed.
    Policy {
        /// The revision of this change.
        revision: u64,
        /// The namespace.
        namespace: Namespace,
        /// The version now in force.
        version: u64,
    },
    /// A namespace's kill switch changed.
    KillSwitch {
        /// The revision of this change.
        revision: u64,
        /// The namespace.
        namespace: Namespace,
        /// Whether writes are now blocked.
        writes_blocked: bool,
    },
    /// A tool's registry entry changed: imported, dropped from its server's
    /// manifest, or its penalty flag flipped. Watchers read the entry (or
    /// its absence) from the state.
    Tool {
        /// The revision of this change.
        revision: u64,
        /// The namespace.
        namespace: Namespace,
        /// The tool server.
        server: ServerName,
        /// The tool.
        tool: ToolName,
    },
    /// A breaker is no longer tracked (its namespace was deleted): watchers
    /// drop it and treat the key as closed, so a breaker made again later
    /// under the same key starts from generation 0 without looking stale.
    BreakerRemoved {
        /// The revision of this change.
        revision: u64,
        /// The breaker dropped.
        key: BreakerKey,
    },
}

impl WatchEvent {
    /// The revision this event created.
    pub fn revision(&self) -> u64 {
        match self {
            WatchEvent::Breaker { revision, .. }
            | WatchEvent::Policy { revision, .. }
            | WatchEvent::KillSwitch { revision, .. }
            | WatchEvent::Tool { revision, .. }
            | WatchEvent::BreakerRemoved { revision, .. } => *revision,
        }
    }

    /// The namespace the event belongs to.
    pub fn namespace(&self) -> &Namespace {
        match self {
            WatchEvent::Breaker { view, .. } => &view.key.namespace,
            WatchEvent::BreakerRemoved { key, .. } => &key.namespace,
            WatchEvent::Policy { namespace, .. }
            | WatchEvent::KillSwitch { namespace, .. }
            | WatchEvent::Tool { namespace, .. } => namespace,
        }
    }
}
