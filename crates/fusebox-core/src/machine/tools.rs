//! Tools commands: a manifest import, and the announcement of every change
//! the registry ([`crate::tools`]) makes, each as a watch event with the next
//! revision.

use super::answer::Answer;
use super::state_machine::StateMachine;
use super::watch_event::WatchEvent;
use crate::error::CoreError;
use crate::ledger::LedgerStore;
use crate::name::{Namespace, ServerName};
use crate::time::Timestamp;
use crate::tools::{ManifestOf, ToolId, ToolImport};

impl<L: LedgerStore> StateMachine<L> {
    pub(super) fn import_tools(
        &mut self,
        ns: &Namespace,
        server: &ServerName,
        tools: &[ToolImport],
        actor: &str,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) -> Result<Answer, CoreError> {
        // A refused import changes nothing: check the namespace limit first,
        // create the namespace only once the import is taken.
        self.fleet.check_namespace_room(ns)?;
        let document = self.policy_document(ns).clone();
        let of = ManifestOf {
            namespace: ns,
            server,
            actor,
        };
        let fleet = &mut self.fleet;
        let imported = fleet.tools.import(&of, tools, &document, now, &mut |id| {
            fleet.revision += 1;
            events.push(tool_event(fleet.revision, id));
        })?;
        self.fleet.touch_namespace(ns)?;
        Ok(Answer::ToolsImported(imported))
    }

    /// Re-judges the penalties of `ids` at `now`, announcing each flip.
    pub(super) fn update_penalties<'a>(
        &mut self,
        ids: impl IntoIterator<Item = &'a ToolId>,
        now: Timestamp,
        events: &mut Vec<WatchEvent>,
    ) {
        let fleet = &mut self.fleet;
        fleet.tools.update_penalties(ids, now, &mut |id| {
            fleet.revision += 1;
            events.push(tool_event(fleet.revision, id));
        });
    }
}

/// The watch event for a registry entry that changed.
fn tool_event(revision: u64, id: &ToolId) -> WatchEvent {
    WatchEvent::Tool {
        revision,
        namespace: id.namespace.clone(),
        server: id.server.clone(),
        tool: id.tool.clone(),
    }
}
