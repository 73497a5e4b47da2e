//! The link grant of a resource request, and the check that a program keeps to it.

use crate::error::Error;
use crate::executor::{Mode, PlanCtx, ResourceRequest};
use oxccl_platform::{LinkKind, RankProgram, Task};

/// The link kind to every peer this rank may use (`None`: not requested or broken).
pub(crate) fn grant_links(
    name: &'static str,
    plan: &PlanCtx<'_>,
    req: &ResourceRequest,
) -> Result<Vec<Option<LinkKind>>, Error> {
    let mut links = vec![None; plan.ranks];
    for peer in req.peers.expand(plan.rank, plan.ranks) {
        let no_link = |why| Error::NoLink {
            executor: name.to_string(),
            rank: plan.rank,
            peer,
            why,
        };
        if peer >= plan.ranks || peer == plan.rank {
            return Err(no_link("is not a peer of this rank"));
        }
        links[peer] = Some(
            plan.topology
                .link_kind(plan.rank, peer)
                .ok_or_else(|| no_link(plan.topology.link_status(plan.rank, peer).refusal()))?,
        );
    }
    Ok(links)
}

/// Every remote access goes over a granted link, every wait is local, every notify exists,
/// and staged programs touch no other rank's user buffers.
pub(crate) fn validate_program(
    name: &'static str,
    plan: &PlanCtx<'_>,
    program: &RankProgram,
    links: &[Option<LinkKind>],
    notifies: u32,
) -> Result<(), Error> {
    let me = plan.rank;
    let bad = |s: usize, t: usize, reason: String| Error::BadProgram {
        executor: name.into(),
        rank: me,
        reason: format!("stream {s} task {t}: {reason}"),
    };
    let reachable = |r: usize| r == me || links.get(r).is_some_and(Option::is_some);
    crate::link_access::refuse_put_only_violation(name, plan.topology, program)?;
    for (s, stream) in program.streams.iter().enumerate() {
        for (t, task) in stream.tasks.iter().enumerate() {
            for slice in task.reads().iter().chain(task.writes()) {
                if !reachable(slice.rank) {
                    return Err(bad(
                        s,
                        t,
                        format!("{slice} is on a rank without a granted link"),
                    ));
                }
                if slice.rank != me && slice.buf.is_user() && plan.mode == Mode::Staged {
                    return Err(bad(
                        s,
                        t,
                        format!(
                            "{slice} is another rank's user buffer, which staged mode cannot reach"
                        ),
                    ));
                }
            }
            match task {
                Task::Wait { notify } if notify.rank != me => {
                    return Err(bad(s, t, format!("waits on {notify:?} of another rank")))
                }
                Task::Post { notify } | Task::Wait { notify } if !reachable(notify.rank) => {
                    return Err(bad(
                        s,
                        t,
                        format!("posts {notify:?} on a rank without a granted link"),
                    ))
                }
                Task::Post { notify } | Task::Wait { notify } if notify.index >= notifies => {
                    return Err(bad(
                        s,
                        t,
                        format!("uses notify {notify:?}, beyond the {notifies} requested"),
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(())
}
