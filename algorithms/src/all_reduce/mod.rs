//! AllReduce executors.

pub mod mesh;
pub mod mesh_push;
pub mod one_shot;
pub mod ring;
