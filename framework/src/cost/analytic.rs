//! The analytic α-β estimate: a modelled time from a few ranks' programs, for topologies
//! too large to replay every rank.
//!
//! The discrete-event replay ([`super::model`]) costs O(all tasks of all ranks); on a
//! cluster of thousands of ranks a candidate's programs hold tens of millions of tasks,
//! and an executor whose programs grow with the rank count (a mesh) holds n² of them.
//! When the replay would pass its budget, select_alg plans only representative ranks
//! ([`crate::planner::sample`]) and asks this estimate instead.
//!
//! For each sampled rank, each stream runs its tasks in order, alone, as if every peer
//! were always ready (on a symmetric topology every rank does the same work, so none
//! waits long for a slower one):
//! - every task pays the dispatch cost;
//! - a Copy or Reduce pays the larger of its copy-engine time and, for each slice on a
//!   peer, that link's latency plus the bytes over its bandwidth (α + n·β per transfer);
//! - a Wait on a link notify pays the latency of the peer's link to this rank (the
//!   signal's flight); fork/join and executor-private notifies cost nothing more.
//!
//! The rank's time is the longest stream, but at least the bytes every link direction and
//! (across servers) the rank's NIC carried over their bandwidth: streams that share a link
//! share its bandwidth, as in the replay. Where servers share one memory system (a CPU
//! host), it is also at least the rank's copy bytes times its server's ranks over that
//! memory's bandwidth. On a CPU host (a topology with a
//! [`Processor`](crate::topology::Processor)) tasks cost thread time instead of dispatch
//! and engine time, peers of the host are memory rather than links, a wait on one costs a
//! wake-up on the threaded path, and the rank's time is at least its server's ranks'
//! thread time over the threads that run them, as in the replay, with the share of their
//! traffic the host's caches serve taken off the memory system and moved at the cached
//! rate (the server's footprint scaled from the sampled rank's). The estimate is the
//! slowest sampled rank's time.
//! It is a critical-path lower bound of what the replay would give on a symmetric
//! topology, which is what selection compares; `oxccl check --explain` says when it
//! decided.

use super::{CostError, CostParams};
use crate::planner::Loops;
use crate::topology::{NicScope, Topology};
use oxccl_platform::{LinkKind, LinkSignal, NotifyLayout, RankProgram, Task};
use std::collections::HashMap;

/// The estimated time of an operation, seconds, from the programs of some of its ranks
/// (`programs`, each knowing its rank, with where its loop iterations lie) on `topology`
/// with notify layout `layout`. A task counts as often as its iteration stands for
/// ([`LoopMark::repeats`](crate::planner::LoopMark::repeats)): a program planned with
/// [`Iterations::Sampled`](crate::planner::Iterations::Sampled) is estimated as the whole
/// loop.
pub fn estimate(
    programs: &[(&RankProgram, &Loops)],
    topology: &Topology,
    layout: NotifyLayout,
    params: &CostParams,
) -> Result<f64, CostError> {
    params.validate()?;
    // From the programs given: on a topology sampled by representative ranks, a write by
    // a rank not sampled is not seen (a host small enough is replayed whole instead).
    let writers = super::Writers::on(topology, programs.iter().map(|(p, _)| *p));
    let mut worst: f64 = 0.0;
    for (program, loops) in programs {
        let time = rank_time(program, loops, topology, layout, params, &writers)?;
        worst = worst.max(time);
    }
    Ok(worst)
}

/// How often each task of `stream` counts: its iteration's repeats (1 outside marks).
fn weights(loops: &Loops, stream: usize, len: usize) -> Vec<(std::ops::Range<usize>, f64)> {
    let mut segments: Vec<_> = (0..loops.marks.len())
        .map(|i| (loops.tasks(i, stream), loops.marks[i].repeats as f64))
        .collect();
    let end = segments.last().map_or(0, |(r, _)| r.end);
    segments.push((end..len, 1.0));
    segments
}

/// Bytes per link direction and per NIC one rank's program moves.
#[derive(Default)]
struct Traffic {
    links: HashMap<(usize, usize), f64>,
    nic_out: f64,
    nic_in: f64,
    /// Copy bytes of the rank's own server memory system ([`super::memory_bytes`]).
    memory: f64,
    /// Thread seconds of its data tasks on a CPU host ([`super::thread_seconds`]).
    thread: f64,
}

fn rank_time(
    program: &RankProgram,
    loops: &Loops,
    topology: &Topology,
    layout: NotifyLayout,
    params: &CostParams,
    writers: &super::Writers,
) -> Result<f64, CostError> {
    let me = program.rank;
    let processor = topology.processor();
    // On a CPU host: the inline path (one thread, no wake-ups) or the workers (a wake-up
    // per stream and per wait on a peer), as the replay has it.
    // The bytes its data tasks move: of the sampled iterations only when the program is
    // sampled, which a host's topologies, small enough to be replayed whole, never are.
    let moved = super::moved_bytes(program);
    let inline = processor.is_some_and(|p| {
        let limit = p.inline_limit();
        limit > 0 && moved <= limit
    });
    let processes = processor.is_some_and(|p| p.ranks_are_processes());
    let wake = match processor {
        Some(p) if !inline && !processes => p.wake_us * 1e-6,
        _ => 0.0,
    };
    // Ranks in processes of their own: a switch per round of waits, queued on the
    // server's cores with the other ranks' (as the replay has it).
    let switch = match processor {
        Some(p) if processes => {
            let ranks = topology.server_ranks(topology.server_of(me)).len();
            p.wake_us * 1e-6 * (ranks as f64 / p.workers as f64).max(1.0)
        }
        _ => 0.0,
    };
    let dispatch = match processor {
        Some(_) => 0.0,
        None => params.dispatch_s(),
    };
    let caches = processor.map_or(super::Caches::NONE, |p| {
        super::Caches::of(p, server_footprint(program, topology))
    });
    let mut traffic = Traffic::default();
    let mut longest: f64 = 0.0;
    for (s, stream) in program.streams.iter().enumerate() {
        let mut t = wake;
        for (range, weight) in weights(loops, s, stream.tasks.len()) {
            for i in range {
                let task = &stream.tasks[i];
                let after_wait = i > 0 && matches!(stream.tasks[i - 1], Task::Wait { .. });
                if matches!(task, Task::Wait { .. }) && !after_wait {
                    t += switch * weight;
                }
                let at = (me, s, i);
                let cost = match task {
                    Task::Copy { .. } | Task::Reduce { .. } => {
                        let transfer = transfers(task, at, weight, topology, &mut traffic)?;
                        traffic.memory +=
                            super::memory_bytes(task) * (1.0 - caches.cached) * weight;
                        match processor {
                            Some(p) => {
                                let forwarded = match inline {
                                    true => 0.0,
                                    false => writers.forwarded_share(me, task),
                                };
                                let thread =
                                    super::thread_seconds(p, task, caches, moved, forwarded);
                                traffic.thread += thread * weight;
                                let split = super::splits(p, task) && !inline;
                                let threads = if split { p.workers as f64 } else { 1.0 };
                                (thread / threads).max(transfer)
                            }
                            None => params.engine_seconds(task).max(transfer),
                        }
                    }
                    Task::Wait { notify } => match signal_peer(notify.index, layout) {
                        Some(peer) if super::host_memory(topology, peer, me) => wake,
                        Some(peer) => topology.link(peer, me).map_or(0.0, |l| l.latency_s()),
                        None => 0.0,
                    },
                    Task::Post { .. } => 0.0,
                };
                t += (dispatch + cost) * weight;
            }
        }
        longest = longest.max(t);
    }
    let mut bound = longest;
    for (&(from, to), &bytes) in &traffic.links {
        if let Some(spec) = topology.link(from, to) {
            bound = bound.max(bytes / spec.bytes_per_s());
        }
    }
    // Every rank of a symmetric server does this rank's work, over one memory system and,
    // on a CPU host, one set of threads; and through one NIC where they share it.
    let ranks = topology.server_ranks(topology.server_of(me)).len() as f64;
    if let Some(nic) = topology.nic_gbps() {
        let sharing = match topology.nic_scope() {
            NicScope::Rank => 1.0,
            NicScope::Server => ranks,
        };
        bound = bound.max(traffic.nic_out.max(traffic.nic_in) * sharing / (nic * 1e9));
    }
    if let Some(memory) = topology.memory_gbps() {
        bound = bound.max(traffic.memory * ranks / (memory * 1e9));
    }
    if let Some(p) = processor {
        let threads = if inline { 1.0 } else { p.workers as f64 };
        bound = bound.max(wake + traffic.thread * ranks / threads);
    }
    Ok(bound)
}

/// The bytes an operation touches on `program`'s rank's server, from that one rank's
/// program: the [`super::spans`] of the server's buffers it touches, per rank they belong
/// to, times the server's ranks, as a symmetric server would have it.
fn server_footprint(program: &RankProgram, topology: &Topology) -> usize {
    let server = topology.server_of(program.rank);
    let local = |rank: usize| rank < topology.ranks() && topology.server_of(rank) == server;
    let mut bytes = 0usize;
    let mut owners: Vec<usize> = Vec::new();
    for (&(rank, _), &(start, end)) in super::spans([program]).iter() {
        if local(rank) {
            bytes = bytes.saturating_add(end - start);
            owners.push(rank);
        }
    }
    owners.sort_unstable();
    owners.dedup();
    let server_ranks = topology.server_ranks(server).len();
    (bytes / owners.len().max(1)).saturating_mul(server_ranks)
}

/// The longest of a task's transfers to or from peers (α + bytes·β each), recording the
/// bytes each link direction carries, `weight` times.
fn transfers(
    task: &Task,
    (me, stream, index): (usize, usize, usize),
    weight: f64,
    topology: &Topology,
    traffic: &mut Traffic,
) -> Result<f64, CostError> {
    let mut longest: f64 = 0.0;
    let reads = task.reads().iter().map(|s| (*s, true));
    let writes = task.writes().iter().map(|s| (*s, false));
    for (slice, read) in reads.chain(writes) {
        // A peer of one CPU host is memory, not a link: the thread's time covers it.
        let host_peer = super::host_memory(topology, slice.rank, me);
        if slice.rank == me || host_peer {
            continue;
        }
        let (from, to) = if read {
            (slice.rank, me)
        } else {
            (me, slice.rank)
        };
        let spec = topology.link(from, to).ok_or(CostError::NoLink {
            rank: me,
            stream,
            task: index,
            peer: slice.rank,
            why: topology.link_status(from, to).refusal(),
        })?;
        let bytes = slice.len as f64;
        *traffic.links.entry((from, to)).or_default() += bytes * weight;
        if spec.kind == LinkKind::Rdma {
            match read {
                true => traffic.nic_in += bytes * weight,
                false => traffic.nic_out += bytes * weight,
            }
        }
        longest = longest.max(spec.latency_s() + bytes / spec.bytes_per_s());
    }
    Ok(longest)
}

/// The peer whose signal a link notify of this index carries; `None` for local notifies.
fn signal_peer(index: u32, layout: NotifyLayout) -> Option<usize> {
    if index >= layout.local_base() || layout.ranks < 2 {
        return None;
    }
    let stride =
        layout.link(0, 1, 0, LinkSignal::Ack).index - layout.link(0, 0, 0, LinkSignal::Ack).index;
    Some((index / stride.max(1)) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_platform::{Buf, NotifyId, Slice};

    fn layout(ranks: usize) -> NotifyLayout {
        NotifyLayout {
            ranks,
            link_channels: 2,
        }
    }

    #[test]
    fn every_rank_of_a_host_copies_over_its_one_memory_system() {
        // The memory system alone (the host's threads are in the next test).
        let host = crate::topology::presets::host(4)
            .with_processor(None)
            .unwrap();
        let mut p = RankProgram::new(0, 1);
        let len = 1 << 20;
        p.streams[0].copy(
            Slice::new(0, Buf::Input, 0, len),
            Slice::new(0, Buf::Output, 0, len),
        );
        let params = CostParams {
            dispatch_us: 0.0,
            ..CostParams::default()
        };
        let got = estimate(&[(&p, &Loops::default())], &host, layout(4), &params).unwrap();
        // The sampled rank stands for 4 that copy alike over one memory system.
        let memory = crate::topology::presets::HOST_MEMORY_GBPS * 1e9;
        let want = 4.0 * len as f64 / memory;
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        // Each device with memory of its own: the copy engine alone.
        let own = estimate(
            &[(&p, &Loops::default())],
            &Topology::single_server(4),
            layout(4),
            &params,
        )
        .unwrap();
        assert!(own < want / 10.0, "{own} vs {want}");
    }

    #[test]
    fn a_hosts_ranks_share_its_threads_as_in_the_replay() {
        let processor = crate::topology::Processor {
            workers: 2,
            task_us: 1.0,
            wake_us: 3.0,
            thread_gbps: 1.0,
            inline_bytes: 4096,
            split_bytes: usize::MAX,
            ranks: crate::topology::RanksRun::InPool,
            // No cache: every byte at thread_gbps, over the memory system.
            cache_bytes: 0,
            cache_gbps: 1.0,
            llc_bytes: 0,
            forward_gbps: 0.0,
        };
        // The estimate of one rank's copy of `len` bytes, standing for the host's 4.
        let copy_on = |processor, len: usize| {
            let host = crate::topology::presets::host(4)
                .with_processor(Some(processor))
                .unwrap();
            let mut p = RankProgram::new(0, 1);
            p.streams[0].copy(
                Slice::new(0, Buf::Input, 0, len),
                Slice::new(0, Buf::Output, 0, len),
            );
            let params = CostParams::default();
            estimate(&[(&p, &Loops::default())], &host, layout(4), &params).unwrap()
        };
        let copy = |len: usize| copy_on(processor, len);
        let work = |len: usize| 1e-6 + len as f64 / 1e9;
        // Four ranks' 1 MiB copies over two workers, after a wake-up.
        let (got, want) = (copy(1 << 20), 3e-6 + 4.0 * work(1 << 20) / 2.0);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        // Small ones run inline: one thread, no wake-up.
        let (got, want) = (copy(1024), 4.0 * work(1024));
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        // A cache that holds the four ranks' buffers (2 MiB each, 8 MiB in all) serves
        // their bytes at its rate; one of half that size serves half of them.
        let cached = |cache_bytes: usize| {
            let cache = crate::topology::Processor {
                cache_bytes,
                cache_gbps: 4.0,
                llc_bytes: 0,
                ..processor
            };
            copy_on(cache, 1 << 20)
        };
        let mb = (1 << 20) as f64;
        let work = |per_byte: f64| 1e-6 + mb * per_byte;
        let want = 3e-6 + 4.0 * work(1.0 / 4e9) / 2.0;
        let got = cached(8 << 20);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        let want = 3e-6 + 4.0 * work(0.5 / 4e9 + 0.5 / 1e9) / 2.0;
        let got = cached(4 << 20);
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }

    #[test]
    fn the_ranks_of_a_server_that_share_a_nic_divide_it() {
        let len = 1 << 20;
        let mut p = RankProgram::new(0, 1);
        p.streams[0].copy(
            Slice::new(0, Buf::Input, 0, len),
            Slice::new(4, Buf::Output, 0, len),
        );
        let params = CostParams {
            dispatch_us: 0.0,
            ..CostParams::default()
        };
        let at = |t: &Topology| estimate(&[(&p, &Loops::default())], t, layout(8), &params);
        let per_rank = Topology::servers(vec![4, 4]).unwrap();
        let alone = at(&per_rank).unwrap();
        // The sampled rank stands for 4 that send alike through the server's one NIC.
        let shared = per_rank
            .clone()
            .with_nic_scope(crate::topology::NicScope::Server);
        let nic = per_rank.nic_gbps().unwrap() * 1e9;
        let want = 4.0 * len as f64 / nic;
        let got = at(&shared).unwrap();
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        assert!(alone < want / 2.0, "{alone} vs {want}");
    }

    #[test]
    fn a_transfer_costs_latency_plus_bytes_over_bandwidth() {
        let t = Topology::single_server(2);
        let spec = t.link(0, 1).unwrap();
        let mut p = RankProgram::new(0, 1);
        let len = 1 << 20;
        p.streams[0].copy(
            Slice::new(0, Buf::Input, 0, len),
            Slice::new(1, Buf::CclIn, 0, len),
        );
        let params = CostParams::default();
        let got = estimate(&[(&p, &Loops::default())], &t, layout(2), &params).unwrap();
        let want = params.dispatch_s() + spec.latency_s() + len as f64 / spec.bytes_per_s();
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }

    #[test]
    fn waits_for_peers_pay_their_latency_and_local_ones_nothing() {
        let t = Topology::single_server(2);
        let l = layout(2);
        let mut p = RankProgram::new(0, 1);
        p.streams[0].wait(l.link(0, 1, 0, LinkSignal::DataSignal));
        p.streams[0].wait(NotifyId {
            rank: 0,
            index: l.local_base(),
        });
        let params = CostParams {
            dispatch_us: 0.0,
            ..CostParams::default()
        };
        let got = estimate(&[(&p, &Loops::default())], &t, l, &params).unwrap();
        assert!((got - t.link(1, 0).unwrap().latency_s()).abs() < 1e-15);
    }

    #[test]
    fn shared_links_bound_parallel_streams() {
        let t = Topology::single_server(2);
        let mut p = RankProgram::new(0, 3);
        let len = 1 << 24;
        for s in 1..3 {
            p.streams[s].copy(
                Slice::new(0, Buf::Input, 0, len),
                Slice::new(1, Buf::CclIn, 0, len),
            );
        }
        let params = CostParams::default();
        let got = estimate(&[(&p, &Loops::default())], &t, layout(2), &params).unwrap();
        let bw = t.link(0, 1).unwrap().bytes_per_s();
        assert!(got >= 2.0 * len as f64 / bw, "two streams share one link");
    }

    #[test]
    fn a_missing_link_is_an_error() {
        let t = Topology::single_server(3).with_broken(0, 2).unwrap();
        let mut p = RankProgram::new(0, 1);
        p.streams[0].copy(
            Slice::new(2, Buf::CclIn, 0, 8),
            Slice::new(0, Buf::CclOut, 0, 8),
        );
        let err = estimate(
            &[(&p, &Loops::default())],
            &t,
            layout(3),
            &CostParams::default(),
        )
        .unwrap_err();
        assert!(matches!(err, CostError::NoLink { peer: 2, .. }), "{err}");
    }
}
