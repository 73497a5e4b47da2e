//! AllReduce executors.

pub mod mesh;
pub mod ring;
