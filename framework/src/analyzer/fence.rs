//! Start conditions for streams, as data: the fence edges a sequence of operations adds to
//! the happens-before graph (see [`super::sequence`]).
//!
//! A [`Barrier`] is passed once every stream and barrier it lists has ended or been passed;
//! a stream with a start barrier runs its first task only after that. The canonical
//! execution ([`super::schedule`]) lays a passed barrier out as a short chain of fence
//! nodes, each with two predecessors (the previous node and one more dependency), so the
//! happens-before search keeps its two-predecessor graph and needs no change. A barrier
//! with one dependency is that dependency itself and costs no node.

use super::index::NONE;

/// A join point: passed once every listed stream ended and every listed barrier passed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Barrier {
    /// Global stream numbers.
    pub streams: Vec<u32>,
    /// Barriers with lower numbers (barriers never wait on later ones, so they cannot
    /// form a cycle).
    pub barriers: Vec<u32>,
}

/// Start conditions of every stream of an index.
#[derive(Clone, Debug, Default)]
pub(crate) struct Fences {
    /// Per global stream, the barrier it starts after, or `NONE`.
    pub start: Vec<u32>,
    pub barriers: Vec<Barrier>,
}

impl Fences {
    /// No stream waits for anything (one operation alone).
    pub fn none(streams: usize) -> Self {
        Fences {
            start: vec![NONE; streams],
            barriers: Vec::new(),
        }
    }
}
