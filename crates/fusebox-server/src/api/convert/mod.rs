//! Between the wire and the core. The request checks and conversions live in
//! [`fusebox_api::convert`] (built without storage, so they can be fuzzed);
//! rendering the watch hub's snapshots and events is the node's own.

pub use fusebox_api::convert::*;

pub mod watch;
