//! Barrier executors: no data; a rank leaves the barrier once every rank has entered it.

pub mod dissemination;
pub mod spanning_tree;
