//! What a task may do over a put-only link, checked by the planner and by the analyzer.
//!
//! A put-only link ([`LinkAccess::Put`]: RDMA write, TCP) carries writes into the peer's
//! registered device buffers (CclIn, CclOut, Scratch) and posts of its notifies, and
//! nothing else. So a task of rank `me` that names a slice of peer `p` over such a link
//! may only *write* it, and only when it is one of those three buffers: reading any of
//! the peer's buffers would need a remote load, and writing its user buffers (Input,
//! Output) would need them registered per call, which no transport here does.
//!
//! The rule is per slice, not per task: a Reduce whose destination is a peer's CclIn and
//! whose sources are local is a put of the reduced bytes; the same Reduce listing the
//! destination among its sources (accumulate in place) reads the peer and is refused.
//!
//! [`first_violation`] is the one definition; the planner refuses a program that has one
//! ([`crate::error::Error::PutOnlyLink`], before the program reaches a device) and the
//! analyzer's link check reports each (`oxccl check`), so both name the same stream, task
//! and slice.

use crate::error::Error;
use crate::topology::Topology;
use oxccl_platform::{Buf, LinkAccess, Rank, RankProgram, Slice, Task};
use std::fmt;

/// A task that reads a peer's buffer, or writes a peer's user buffer, over a put-only link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutOnlyAccess {
    /// The rank whose program holds the task.
    pub rank: Rank,
    pub stream: usize,
    /// Index of the task in its stream.
    pub task: usize,
    /// The peer's slice the task touches.
    pub slice: Slice,
    /// True when the task writes the slice (a user buffer), false when it reads it.
    pub write: bool,
}

impl fmt::Display for PutOnlyAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (verb, why) = if self.write {
            (
                "writes",
                "a put-only link reaches only the peer's CclIn, CclOut and Scratch",
            )
        } else {
            ("reads", "a put-only link cannot read the peer's memory")
        };
        write!(
            f,
            "rank {} stream {} task {} {verb} {} over the put-only link {}-{}: {why}; \
             write into the peer's CCL buffers or scratch and let it read locally",
            self.rank, self.stream, self.task, self.slice, self.rank, self.slice.rank
        )
    }
}

/// True when `slice`, touched by a task of `me` (`write`: as a destination), breaks the
/// put-only rule on `topology`. Local slices and slices over load/store
/// or missing links (the link check reports those) pass.
pub fn breaks_put_only(topology: &Topology, me: Rank, slice: &Slice, write: bool) -> bool {
    if slice.rank == me || topology.link_access(me, slice.rank) != Some(LinkAccess::Put) {
        return false;
    }
    !write || !put_target(slice.buf)
}

/// The buffers a put-only link may write: the peer's registered device buffers.
pub const fn put_target(buf: Buf) -> bool {
    matches!(buf, Buf::CclIn | Buf::CclOut | Buf::Scratch)
}

/// Every violation of task `task` of `stream` in `me`'s program, reads first.
pub fn task_violations(
    topology: &Topology,
    me: Rank,
    stream: usize,
    task_index: usize,
    task: &Task,
) -> Vec<PutOnlyAccess> {
    let reads = task.reads().iter().copied().map(|s| (s, false));
    let writes = task.writes().iter().copied().map(|s| (s, true));
    reads
        .chain(writes)
        .filter(|(s, write)| breaks_put_only(topology, me, s, *write))
        .map(|(slice, write)| PutOnlyAccess {
            rank: me,
            stream,
            task: task_index,
            slice,
            write,
        })
        .collect()
}

/// The first task of `program` that breaks the put-only rule on `topology`, in stream
/// then task order. Costs nothing beyond the scan when every link is load/store.
pub fn first_violation(topology: &Topology, program: &RankProgram) -> Option<PutOnlyAccess> {
    if topology.all_load_store() {
        return None;
    }
    program.streams.iter().enumerate().find_map(|(s, stream)| {
        stream
            .tasks
            .iter()
            .enumerate()
            .find_map(|(t, task)| task_violations(topology, program.rank, s, t, task).pop())
    })
}

/// The planner's refusal: [`Error::PutOnlyLink`] for `executor`'s first violation in
/// `program`, if it has one.
pub fn refuse_put_only_violation(
    executor: &str,
    topology: &Topology,
    program: &RankProgram,
) -> Result<(), Error> {
    match first_violation(topology, program) {
        None => Ok(()),
        Some(access) => Err(Error::PutOnlyLink {
            executor: executor.to_string(),
            access,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::presets::preset;
    use oxccl_platform::{DataType, ReduceOp, StreamProgram};

    fn program(rank: Rank, build: impl Fn(&mut StreamProgram)) -> RankProgram {
        let mut p = RankProgram::new(rank, 1);
        build(&mut p.streams[0]);
        p
    }

    #[test]
    fn reads_and_user_writes_over_put_links_are_named() {
        let tcp = preset("tcp8").unwrap();
        let local = Slice::new(0, Buf::CclIn, 0, 64);
        let peer_in = Slice::new(3, Buf::CclIn, 0, 64);
        let pull = program(0, |s| s.copy(peer_in, local));
        let v = first_violation(&tcp, &pull).expect("a read over tcp");
        assert_eq!((v.rank, v.stream, v.task, v.write), (0, 0, 0, false));
        assert_eq!(v.slice, peer_in);
        let text = v.to_string();
        assert!(text.contains("reads") && text.contains("0-3"), "{text}");

        let user = Slice::new(3, Buf::Output, 0, 64);
        let push_user = program(0, |s| {
            s.copy(local, peer_in);
            s.copy(local, user);
        });
        let v = first_violation(&tcp, &push_user).expect("a user write over tcp");
        assert_eq!((v.task, v.write, v.slice), (1, true, user));

        let accumulate = program(0, |s| {
            s.reduce_to(
                vec![local, peer_in],
                vec![peer_in],
                DataType::F32,
                ReduceOp::Sum,
            )
        });
        assert!(!first_violation(&tcp, &accumulate).unwrap().write);
    }

    #[test]
    fn puts_into_ccl_buffers_pass_and_load_store_links_allow_anything() {
        let tcp = preset("tcp8").unwrap();
        let local = Slice::new(0, Buf::Input, 0, 64);
        let put = program(0, |s| {
            s.copy(local, Slice::new(5, Buf::Scratch, 0, 64));
            s.reduce_to(
                vec![local, Slice::new(0, Buf::CclIn, 0, 64)],
                vec![Slice::new(5, Buf::CclOut, 0, 64)],
                DataType::F32,
                ReduceOp::Sum,
            );
        });
        assert_eq!(first_violation(&tcp, &put), None);
        let two = preset("2x8").unwrap();
        let pull_intra = program(0, |s| s.copy(Slice::new(7, Buf::Input, 0, 64), local));
        assert_eq!(first_violation(&two, &pull_intra), None);
        let pull_inter = program(0, |s| s.copy(Slice::new(8, Buf::Input, 0, 64), local));
        assert!(first_violation(&two, &pull_inter).is_some());
    }
}
