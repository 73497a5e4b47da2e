//! Templates: reusable communication patterns, each taking one typed parameter struct.
//!
//! Executors of every operator are built from these; plugins call them too (through the
//! `oxccl` facade).

pub mod chunks;
pub mod mesh;
pub mod peer_round;
pub mod ring;
pub mod ring_all_gather;
pub mod ring_order;
pub mod ring_reduce_scatter;

pub use chunks::even_chunks;
pub use mesh::{mesh_all_gather, mesh_peer, mesh_reduce_scatter, mesh_resources, MeshParams};
pub use peer_round::{all_peers_round, Round};
pub use ring::RingParams;
pub use ring_all_gather::ring_all_gather;
pub use ring_order::{healthy_ring, healthy_ring_for, ring_neighbours};
pub use ring_reduce_scatter::{ring_reduce_scatter, ring_reduce_scatter_into, RingTargets};
