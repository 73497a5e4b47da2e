//! Templates: reusable communication patterns, each taking one typed parameter struct.
//!
//! Executors of every operator are built from these; plugins call them too (through the
//! `oxccl` facade).

pub mod chunks;
pub mod double_ring;
pub mod hierarchy;
pub mod mesh;
pub mod nb;
pub mod nhr;
pub mod p2p;
pub mod p2p_put;
pub mod peer_round;
pub mod put;
pub mod put_mesh;
pub mod put_rhd;
pub mod put_ring;
pub mod put_step;
pub mod relay;
pub mod relay_mesh;
pub mod relay_p2p;
pub mod relay_rooted;
pub mod rhd;
pub mod ring;
pub mod ring_all_gather;
pub mod ring_order;
pub mod ring_reduce_scatter;
pub mod tree;

pub use chunks::even_chunks;
pub use double_ring::{double_ring, Direction};
pub use hierarchy::{
    hier_request, pull_from_server, server_all_gather, server_round, server_slaves, Level1,
    Servers, HIER_PUT_CONSTRAINTS,
};
pub use mesh::{mesh_all_gather, mesh_peer, mesh_reduce_scatter, mesh_resources, MeshParams};
pub use nb::{nb_all_gather, nb_peers, nb_reduce_scatter, nb_reduce_scatter_into, nb_schedule};
pub use nhr::{
    nhr_all_gather, nhr_peers, nhr_reduce_scatter, nhr_reduce_scatter_into, nhr_schedule,
};
pub use p2p::{p2p_exchange, p2p_peers, p2p_slot_bytes, P2pParams, P2pPhase};
pub use p2p_put::p2p_put_exchange;
pub use peer_round::{all_peers_round, Round};
pub use put::{
    await_puts, finish_puts, land_from_scratch, landing, lands_in_place, open_for_puts, put,
    slot_len, with_landing_scratch,
};
pub use put_mesh::{put_mesh_all_gather, put_mesh_reduce_scatter, PutMesh};
pub use put_rhd::{
    put_rhd_all_gather, put_rhd_all_reduce, put_rhd_reduce_scatter, PutRhd, PutRhdRuns, PutRhdShape,
};
pub use put_ring::{
    put_ring_all_gather, put_ring_reduce_scatter, with_group_ring, ChunkSlice, PutRing,
};
pub use put_step::put_step;
pub use relay::{common_neighbours, relay_duties, relay_pieces, require_routes, route, Route};
pub use relay_mesh::{
    iteration_count_bound, neighbour_round, relay_mesh_all_gather, relay_mesh_reduce_scatter,
    relay_mesh_resources, relay_scratch_bytes, relays_for, NeighbourRound, RelayLayout,
    RelayMeshParams, RelayPlan, RELAY_COST_BYTES,
};
pub use rhd::{
    require_links, rhd_all_gather, rhd_all_reduce, rhd_links, rhd_peers, rhd_reduce_scatter,
    rhd_reduce_scatter_into,
};
pub use ring::RingParams;
pub use ring_all_gather::ring_all_gather;
pub use ring_order::{healthy_ring, healthy_ring_for, ring_neighbours, RingOrder};
pub use ring_reduce_scatter::{ring_reduce_scatter, ring_reduce_scatter_into, RingTargets};
pub use tree::BinomialTree;
