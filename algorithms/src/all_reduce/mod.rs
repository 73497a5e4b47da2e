//! AllReduce executors.

pub mod double_ring;
pub mod hier_levels;
pub mod hier_pipelined;
pub mod mesh;
pub mod mesh_push;
pub mod nb;
pub mod nhr;
pub mod one_shot;
pub mod put_ring;
pub mod relay_mesh;
pub mod relay_mesh_single;
pub mod rhd;
pub mod ring;
