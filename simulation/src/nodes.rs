//! Fusebox nodes as simulated hosts: the real server over the simulated
//! network, with their RocksDB directories outside the host so a crash and
//! restart keeps what was written.

use crate::net::{sim_clock_ms, SimNet};
use crate::world::World;
use fusebox_proto::net::Net;
use fusebox_server::node::{start_in, NodeConfig, NodeEnv, Timing};
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// The port every node listens on.
pub const PORT: u16 = 7000;

/// A node's gRPC address.
pub fn addr(id: u64) -> String {
    format!("n{id}:{PORT}")
}

/// A lazily connected channel to `addr` over the simulated network, every
/// call bounded by `timeout`.
pub fn channel(addr: &str, timeout: Duration) -> Channel {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap_or_else(|_| Endpoint::from_static("http://invalid:1"))
        .connect_timeout(Duration::from_millis(500))
        .timeout(timeout);
    Net::Custom(Arc::new(SimNet)).channel(endpoint)
}

/// Raft timing for the simulation: short, so elections and snapshots
/// happen within a run.
fn timing() -> Timing {
    Timing {
        heartbeat_ms: 100,
        election_min_ms: 500,
        election_max_ms: 1_000,
        snapshot_every_entries: 300,
        log_kept_behind_snapshot: 50,
        tick_ms: 200,
    }
}

fn config(id: u64, nodes: u64, data: &Path) -> NodeConfig {
    NodeConfig {
        id,
        listen: std::net::SocketAddr::from(([0, 0, 0, 0], PORT)),
        advertise: Some(addr(id)),
        http: None,
        peers: (1..=nodes).map(|i| (i, addr(i))).collect(),
        data_dir: data.join(format!("n{id}")),
        cluster_id: "sim".into(),
        join: false,
        timing: timing(),
        peer_listen: None,
        tls: None,
        peer_tls: None,
        // A simulated network of its own: plaintext, as TLS's randomness
        // (ring draws from the OS) would make runs unrepeatable.
        insecure: true,
        // Callers are the simulation's own agents and operator; the guard
        // still runs on every call, admitting them as the open caller.
        auth: false,
        init_auth: None,
        caller_limits: Default::default(),
    }
}

/// Registers every node of `world` as a host of `sim`; each (re)start opens
/// its data directory under `data` and seeds Raft from the run's seed, the
/// node and its boot count.
pub fn register(sim: &mut turmoil::Sim<'_>, world: &Rc<World>, data: &Path) {
    let nodes = world.nodes.len() as u64;
    for slot in &world.nodes {
        let (world, id) = (world.clone(), slot.id);
        let config = config(id, nodes, data);
        slot.data_dir.replace(config.data_dir.clone());
        sim.host(slot.name.as_str(), move || {
            let (world, config) = (world.clone(), config.clone());
            async move {
                let Some(slot) = world.node(id) else {
                    return Err("no such node".into());
                };
                let boot = slot.boots.get() + 1;
                slot.boots.set(boot);
                let skew = slot.skew_ms.clone();
                let env = NodeEnv {
                    net: Net::Custom(Arc::new(SimNet)),
                    clock: Arc::new(move || sim_clock_ms(skew.load(Ordering::Relaxed))),
                    raft_seed: world.seed ^ (id << 48) ^ (boot << 32),
                    bugs: world.bugs,
                };
                let node = start_in(config, env)
                    .await
                    .map_err(|e| format!("node {id} did not start: {e}"))?;
                world.log(&slot.name, format!("started (boot {boot})"));
                *slot.backend.borrow_mut() = Some(node.backend.clone());
                let reason = node.raft_stopped().await;
                world.log(&slot.name, format!("raft core stopped: {reason}"));
                Err(format!("node {id}: raft core stopped: {reason}").into())
            }
        });
    }
}
