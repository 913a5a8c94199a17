//! An in-process backend without replication, for testing the API layer.

use super::{Backend, BackendError, Consistency};
use crate::node::env::system_clock_ms;
use crate::watch::{WatchHub, WatchStart};
use fusebox_core::ledger::BoxedLedger;
use fusebox_core::machine::{Applied, Command, SharedStateMachine, StateMachine};
use fusebox_core::{Namespace, Timestamp};
use fusebox_proto::net::Net;
use std::sync::{Arc, Mutex};

/// Applies commands directly to one state machine, stamped with this
/// machine's clock. Not replicated and not durable: API tests only.
#[derive(Clone)]
pub struct LocalBackend {
    state: Arc<Mutex<SharedStateMachine>>,
    hub: Arc<WatchHub>,
}

impl LocalBackend {
    /// A backend over an empty state.
    pub fn new() -> Self {
        let state = StateMachine::new().map_ledger(|l| -> BoxedLedger { Box::new(l) });
        LocalBackend {
            state: Arc::new(Mutex::new(state)),
            hub: Arc::default(),
        }
    }

    /// Applies a command at an explicit time (tests that control time).
    pub fn apply_at(&self, command: &Command, at: Timestamp) -> Result<Applied, BackendError> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| BackendError::Fatal("state lock poisoned".into()))?;
        let applied = state.apply(command, at);
        self.hub.publish(&applied.events);
        Ok(applied)
    }
}

impl Default for LocalBackend {
    fn default() -> Self {
        LocalBackend::new()
    }
}

fn now() -> Timestamp {
    Timestamp::from_millis(system_clock_ms())
}

impl Backend for LocalBackend {
    async fn write(&self, command: Command) -> Result<Applied, BackendError> {
        self.apply_at(&command, now())
    }

    async fn read<T, F>(&self, _consistency: Consistency, f: F) -> Result<T, BackendError>
    where
        F: FnOnce(&SharedStateMachine) -> T + Send + 'static,
        T: Send + 'static,
    {
        let state = self
            .state
            .lock()
            .map_err(|_| BackendError::Fatal("state lock poisoned".into()))?;
        Ok(f(&state))
    }

    async fn watch(
        &self,
        namespace: Namespace,
        from_revision: Option<u64>,
    ) -> Result<WatchStart, BackendError> {
        let state = self
            .state
            .lock()
            .map_err(|_| BackendError::Fatal("state lock poisoned".into()))?;
        self.hub.subscribe(&state, &namespace, from_revision)
    }

    fn leader(&self) -> Option<(u64, String)> {
        None
    }

    fn now_ms(&self) -> u64 {
        system_clock_ms()
    }

    fn is_member(&self) -> bool {
        true
    }

    fn out_of_touch(&self) -> Option<String> {
        None
    }

    fn net(&self) -> Net {
        Net::Tcp
    }
}
