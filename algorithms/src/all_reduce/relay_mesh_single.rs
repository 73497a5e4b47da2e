//! AllReduce relay-mesh-single: [`relay-mesh`](super::relay_mesh) with one relay per
//! missing link, the lowest common neighbour of its two ends.
//!
//! This is the contest's published answer for a mesh with a broken link, kept for
//! comparison: the relay's links carry a whole extra chunk each way, so at large sizes
//! it runs at about half the speed of `relay-mesh`, which spreads the same bytes over
//! every common neighbour. It is registered with a low preference so that it is chosen
//! only by name (`--algo relay-mesh-single`, `OXCCL_ALGO`).

use super::relay_mesh::RelayMeshAllReduce;
use oxccl_framework::{Constraints, OpKind};

oxccl_framework::register_executor! {
    name: "relay-mesh-single",
    op: OpKind::AllReduce,
    description: "relay-mesh with a single relay per missing link (the contest's published answer, for comparison)",
    constraints: Constraints::ANY,
    preference: 1,
    make: || Box::new(RelayMeshAllReduce::single()),
}
