//! The discrete-event replay of every rank's program.
//!
//! A stream issues a task one dispatch cost after its previous task completed. A Post
//! completes when issued and makes its notify arrive after the link latency (none for a
//! local notify); a Wait completes when issued if its notify is set, else when the post
//! arrives; a Copy or Reduce starts its flows and completes one link latency after the last
//! of them drained. Events, in time order (ties in the order they were scheduled):
//!
//! - `Ready(stream)`: the stream issues its next Copy or Reduce. Posts and Waits need no
//!   event of their own: they are issued as soon as the task before them completes, even
//!   when their issue time lies ahead (see [`Engine::issue`]), which removes most events.
//! - `Arrive(notify)`: a post lands; a parked stream resumes, or the notify stays set.
//! - `Flow(flow)`: a flow drained (if its rate did not change since the event was made).
//! - `Landed(stream)`: a Copy or Reduce is complete.
//!
//! Every event does a bounded amount of work (flows touch only the flows sharing their
//! resources), so the replay costs O(tasks · log streams), whatever the byte counts.

use super::flows::{Finish, FlowId, Flows, ResourceId};
use super::{CostError, CostParams};
use crate::fast_hash::FastMap;
use crate::topology::{Processor, Topology};
use oxccl_platform::{LinkKind, NotifyId, RankProgram, Task};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// When one task ran.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct TaskSpan {
    pub rank: usize,
    pub stream: usize,
    pub index: usize,
    /// Seconds since the operation began.
    pub start: f64,
    pub end: f64,
}

/// Sees every task as it completes, in completion order.
pub(crate) trait Observer {
    fn task(&mut self, span: TaskSpan);
}

impl Observer for () {
    fn task(&mut self, _: TaskSpan) {}
}

/// What a replay measured.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct Outcome {
    pub time_s: f64,
    pub tasks: usize,
    pub link_bytes: f64,
    pub blocked_s: f64,
}

#[derive(Copy, Clone, Debug)]
enum What {
    Ready(u32),
    Arrive(u32),
    Flow(FlowId, u32),
    Landed(u32),
    /// A stream of a rank in a process of its own starts a round: its process switch
    /// (see [`Engine::switch_due`]).
    Switch(u32),
}

#[derive(Copy, Clone, Debug)]
struct Event {
    at: f64,
    seq: u64,
    what: What,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    /// Reversed, so the max-heap pops the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .total_cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

#[derive(Clone, Debug)]
struct StreamState<'a> {
    tasks: &'a [Task],
    rank: u32,
    stream: u32,
    pc: u32,
    started: f64,
    pending_flows: u32,
    tail_latency: f64,
    /// The current task is a Wait whose process switch is done.
    switched: bool,
}

/// (rank, stream, task index) of a task, for errors.
type Site = (usize, usize, usize);

/// A link direction's resource and what a transfer over it adds.
#[derive(Copy, Clone, Debug)]
struct LinkUse {
    resource: ResourceId,
    latency_s: f64,
    rdma: bool,
}

const CLEAR: u32 = 0;
const SET: u32 = 1;
/// Notify states at or above this are "stream `state - PARKED` waits here".
const PARKED: u32 = 2;

struct Engine<'a> {
    topology: &'a Topology,
    params: &'a CostParams,
    /// Bytes each rank's program moves ([`super::moved_bytes`]), by rank.
    moved: Vec<usize>,
    /// Who writes each buffer, on a CPU host whose forwarding is modelled ([`super::Writers`]).
    writers: super::Writers,
    streams: Vec<StreamState<'a>>,
    /// Dense ids of the notifies seen so far, and their states.
    notify_ids: FastMap<NotifyId, u32>,
    notifies: Vec<u32>,
    flows: Flows,
    links: FastMap<(u32, u32), LinkUse>,
    nic: Vec<Option<(ResourceId, ResourceId)>>,
    /// Each server's shared memory system, created on first use (when the topology has
    /// one).
    memory: Vec<Option<ResourceId>>,
    engines: Vec<ResourceId>,
    /// Per server with a [`Processor`]: how its ranks' tasks run (see [`host_servers`]).
    hosts: Vec<Option<HostServer>>,
    heap: BinaryHeap<Event>,
    seq: u64,
    finishes: Vec<Finish>,
    transfers: Vec<(usize, usize, usize)>,
    outcome: Outcome,
    finished_streams: usize,
}

/// Replay `programs` (indexed by rank) over `topology`.
pub(crate) fn run(
    programs: &[&RankProgram],
    topology: &Topology,
    params: &CostParams,
    observer: &mut dyn Observer,
) -> Result<Outcome, CostError> {
    if programs.len() != topology.ranks() {
        return Err(CostError::RankMismatch {
            programs: programs.len(),
            topology: topology.ranks(),
        });
    }
    let mut engine = Engine::new(programs, topology, params);
    for s in 0..engine.streams.len() {
        let rank = engine.streams[s].rank as usize;
        // A worker picks a host stream up as a job; the inline path runs it at once.
        let at = engine.dispatch_s(rank) + engine.wake_s(rank);
        engine.schedule(at, What::Ready(s as u32));
    }
    while let Some(event) = engine.heap.pop() {
        engine.handle(event, observer)?;
    }
    if engine.finished_streams < engine.streams.len() {
        return Err(engine.deadlock());
    }
    Ok(engine.outcome)
}

impl<'a> Engine<'a> {
    fn new(
        programs: &'a [&'a RankProgram],
        topology: &'a Topology,
        params: &'a CostParams,
    ) -> Self {
        let mut streams = Vec::new();
        for (rank, p) in programs.iter().enumerate() {
            for (s, stream) in p.streams.iter().enumerate() {
                if !stream.tasks.is_empty() {
                    streams.push(StreamState {
                        tasks: &stream.tasks,
                        rank: rank as u32,
                        stream: s as u32,
                        pc: 0,
                        started: 0.0,
                        pending_flows: 0,
                        tail_latency: 0.0,
                        switched: false,
                    });
                }
            }
        }
        let mut flows = Flows::default();
        let engines = (0..programs.len())
            .map(|_| flows.add_resource(1.0))
            .collect();
        let hosts = host_servers(programs, topology, &mut flows);
        let moved = programs.iter().map(|p| super::moved_bytes(p)).collect();
        let writers = super::Writers::on(topology, programs.iter().copied());
        Engine {
            moved,
            writers,
            topology,
            params,
            streams,
            notify_ids: FastMap::default(),
            notifies: Vec::new(),
            flows,
            links: FastMap::default(),
            nic: vec![None; programs.len()],
            memory: vec![None; topology.server_sizes().len()],
            engines,
            hosts,
            heap: BinaryHeap::new(),
            seq: 0,
            finishes: Vec::new(),
            transfers: Vec::new(),
            outcome: Outcome::default(),
            finished_streams: 0,
        }
    }

    fn schedule(&mut self, at: f64, what: What) {
        self.seq += 1;
        self.heap.push(Event {
            at,
            seq: self.seq,
            what,
        });
    }

    fn handle(&mut self, event: Event, observer: &mut dyn Observer) -> Result<(), CostError> {
        let now = event.at;
        match event.what {
            What::Ready(s) => {
                if let Some(done) = self.issue(s, now)? {
                    self.complete(s, done, observer)?;
                }
            }
            What::Arrive(n) => {
                let state = self.notifies[n as usize];
                if state >= PARKED {
                    self.notifies[n as usize] = CLEAR;
                    let s = state - PARKED;
                    let started = self.streams[s as usize].started;
                    // A wait issued ahead of time ends when both it and the post are
                    // there; one that was parked when the post came must be woken.
                    let done = match started < now {
                        true => now + self.wake_s(self.streams[s as usize].rank as usize),
                        false => started,
                    };
                    self.complete(s, done, observer)?;
                } else {
                    self.notifies[n as usize] = SET;
                }
            }
            What::Flow(flow, version) => {
                let finish = Finish {
                    at: now,
                    flow,
                    version,
                };
                if self.flows.is_current(&finish) {
                    let owner = self.flows.finish(now, flow, &mut self.finishes);
                    self.flush_finishes();
                    let st = &mut self.streams[owner as usize];
                    st.pending_flows -= 1;
                    if st.pending_flows == 0 {
                        let at = now + st.tail_latency;
                        self.schedule(at, What::Landed(owner));
                    }
                }
            }
            What::Landed(s) => {
                let st = &self.streams[s as usize];
                let waiting = matches!(st.tasks[st.pc as usize], Task::Wait { .. });
                if !(waiting && st.switched) {
                    return self.complete(s, now, observer);
                }
                // Switched in: now the Wait itself.
                if let Some(done) = self.issue(s, now)? {
                    self.complete(s, done, observer)?;
                }
            }
            What::Switch(s) => self.start_switch(s, now),
        }
        Ok(())
    }

    /// Issue the current task of stream `s` at time `at`; returns when it completed, if it
    /// completed at once.
    ///
    /// Posts and Waits are issued as soon as the task before them completes, even when
    /// their issue time lies ahead of the event being handled: a Post only schedules its
    /// arrival, and a Wait parked early ends at the later of its issue time and the post's
    /// arrival, so neither depends on events in between. Copies and Reduces change the
    /// rates of other flows and are issued by a `Ready` event at their own time.
    fn issue(&mut self, s: u32, at: f64) -> Result<Option<f64>, CostError> {
        let st = &mut self.streams[s as usize];
        st.started = at;
        let (rank, stream, pc) = (st.rank as usize, st.stream as usize, st.pc as usize);
        let task = &st.tasks[pc];
        match task {
            Task::Post { notify } => {
                let latency = if notify.rank == rank || self.shares_memory(rank, notify.rank) {
                    0.0
                } else {
                    self.link(rank, notify.rank, (rank, stream, pc))?.latency_s
                };
                let n = self.notify_index(*notify);
                self.schedule(at + latency, What::Arrive(n));
                Ok(Some(at))
            }
            Task::Wait { notify } => {
                if self.switch_due(s) {
                    self.schedule(at, What::Switch(s));
                    return Ok(None);
                }
                let n = self.notify_index(*notify);
                match self.notifies[n as usize] {
                    SET => {
                        self.notifies[n as usize] = CLEAR;
                        Ok(Some(at))
                    }
                    CLEAR => {
                        self.notifies[n as usize] = PARKED + s;
                        Ok(None)
                    }
                    other => {
                        let first = &self.streams[(other - PARKED) as usize];
                        Err(CostError::SharedWait {
                            rank,
                            streams: (first.stream as usize, stream),
                            notify: notify.index,
                        })
                    }
                }
            }
            Task::Copy { .. } | Task::Reduce { .. } => {
                self.start_data(s, task, at)?;
                Ok(None)
            }
        }
    }

    /// Start the flows of a Copy or Reduce: one per remote link direction it uses, one
    /// on the rank's copy engine for the local work, and one on its server's shared
    /// memory system when it has one (a CPU host: every copy of every rank crosses the
    /// same memory bus, whichever rank's buffer it touches).
    fn start_data(&mut self, s: u32, task: &Task, now: f64) -> Result<(), CostError> {
        let st = &self.streams[s as usize];
        let me = st.rank as usize;
        let site = (me, st.stream as usize, st.pc as usize);
        self.transfers.clear();
        for slice in task.reads() {
            if !self.shares_memory(me, slice.rank) && slice.rank != me {
                add_transfer(&mut self.transfers, slice.rank, me, slice.len);
            }
        }
        for slice in task.writes() {
            if !self.shares_memory(me, slice.rank) && slice.rank != me {
                add_transfer(&mut self.transfers, me, slice.rank, slice.len);
            }
        }
        let mut tail_latency: f64 = 0.0;
        let mut started = 1;
        for i in 0..self.transfers.len() {
            let (from, to, bytes) = self.transfers[i];
            let link = self.link(from, to, site)?;
            tail_latency = tail_latency.max(link.latency_s);
            let mut resources = [link.resource; 3];
            let mut used = 1;
            if link.rdma {
                if let (Some((tx, _)), Some((_, rx))) = (self.nic(from), self.nic(to)) {
                    resources[1..].copy_from_slice(&[tx, rx]);
                    used = 3;
                }
            }
            self.outcome.link_bytes += bytes as f64;
            self.flows
                .start(now, bytes as f64, &resources[..used], s, &mut self.finishes);
            started += 1;
        }
        let engine = self.engines[me];
        let caches = self.caches(me);
        match self.processor_of(me) {
            Some((processor, threads)) => {
                // On the inline path one thread runs every task: nothing crosses cores.
                let forwarded = match self.host_of(me).is_some_and(|h| h.inline) {
                    true => 0.0,
                    false => self.writers.forwarded_share(me, task),
                };
                let work =
                    super::thread_seconds(processor, task, caches, self.moved[me], forwarded);
                // A split task is shared by every idle worker; another, by one thread.
                let on: &[ResourceId] = match super::splits(processor, task) {
                    true => &[threads],
                    false => &[engine, threads],
                };
                self.flows.start(now, work, on, s, &mut self.finishes);
            }
            None => {
                let work = self.params.engine_seconds(task);
                self.flows
                    .start(now, work, &[engine], s, &mut self.finishes);
            }
        }
        // What the caches serve does not cross the memory bus.
        let bus_bytes = super::memory_bytes(task) * (1.0 - caches.cached);
        if bus_bytes > 0.0 {
            if let Some(memory) = self.memory(me) {
                self.flows
                    .start(now, bus_bytes, &[memory], s, &mut self.finishes);
                started += 1;
            }
        }
        self.flush_finishes();
        let st = &mut self.streams[s as usize];
        st.pending_flows = started;
        st.tail_latency = tail_latency;
        Ok(())
    }

    /// The current task of stream `s` completed at `end`: report it, then issue what
    /// follows (Posts and Waits at once, see [`Engine::issue`]).
    fn complete(&mut self, s: u32, end: f64, observer: &mut dyn Observer) -> Result<(), CostError> {
        let mut end = end;
        let dispatch = self.dispatch_s(self.streams[s as usize].rank as usize);
        loop {
            let st = &mut self.streams[s as usize];
            let index = st.pc as usize;
            let span = TaskSpan {
                rank: st.rank as usize,
                stream: st.stream as usize,
                index,
                start: st.started,
                end,
            };
            observer.task(span);
            if matches!(st.tasks[index], Task::Wait { .. }) {
                self.outcome.blocked_s += end - st.started;
            }
            st.pc += 1;
            st.switched = false;
            self.outcome.tasks += 1;
            self.outcome.time_s = self.outcome.time_s.max(end);
            let Some(next) = st.tasks.get(st.pc as usize) else {
                self.finished_streams += 1;
                return Ok(());
            };
            let at = end + dispatch;
            if matches!(next, Task::Copy { .. } | Task::Reduce { .. }) {
                self.schedule(at, What::Ready(s));
                return Ok(());
            }
            match self.issue(s, at)? {
                Some(done) => end = done,
                None => return Ok(()),
            }
        }
    }

    /// Seconds before each task of `rank` is issued: the device's dispatch cost, or none
    /// on a CPU host, whose per-task cost is thread time (see [`super::thread_seconds`]).
    fn dispatch_s(&self, rank: usize) -> f64 {
        match self.host_of(rank) {
            Some(_) => 0.0,
            None => self.params.dispatch_s(),
        }
    }

    /// Seconds from a stream of `rank` becoming runnable to a thread running it: a
    /// worker's wake-up on a CPU host's threaded path, nothing elsewhere.
    /// Ranks in processes of their own pay theirs as switches instead
    /// ([`Engine::switch_due`]).
    fn wake_s(&self, rank: usize) -> f64 {
        match (self.host_of(rank), self.topology.processor()) {
            (_, Some(p)) if p.ranks_are_processes() => 0.0,
            (Some(host), Some(p)) if !host.inline => p.wake_us * 1e-6,
            _ => 0.0,
        }
    }

    /// Whether stream `s`'s current task, a Wait, first needs its process switched in: a
    /// rank in a process of its own ([`Processor::ranks_are_processes`]) gives its core
    /// up when it starts waiting for peers, and gets one back once per round (its first
    /// Wait after other work; the Waits after it find their posts there). A switch takes a
    /// core for `wake_us`, and the switches of a host's processes queue on its cores:
    /// eight processes on two cores take four switches' time per round each.
    fn switch_due(&self, s: u32) -> bool {
        let st = &self.streams[s as usize];
        let rank = st.rank as usize;
        let processes = self
            .processor_of(rank)
            .is_some_and(|(p, _)| p.ranks_are_processes());
        let pc = st.pc as usize;
        let round_starts = pc == 0 || !matches!(st.tasks[pc - 1], Task::Wait { .. });
        processes && !st.switched && round_starts
    }

    /// Start stream `s`'s process switch at `now`: `wake_us` of work on its rank's
    /// engine and its server's cores; the Wait is issued when it is done.
    fn start_switch(&mut self, s: u32, now: f64) {
        let me = self.streams[s as usize].rank as usize;
        let Some((processor, threads)) = self.processor_of(me) else {
            return;
        };
        let work = processor.wake_us * 1e-6;
        let engine = self.engines[me];
        self.flows
            .start(now, work, &[engine, threads], s, &mut self.finishes);
        self.flush_finishes();
        let st = &mut self.streams[s as usize];
        st.switched = true;
        st.started = now;
        st.pending_flows = 1;
        st.tail_latency = 0.0;
    }

    /// How `rank`'s server runs tasks, when it is a CPU host.
    fn host_of(&self, rank: usize) -> Option<&HostServer> {
        self.hosts[self.topology.server_of(rank)].as_ref()
    }

    /// Whether `a` and `b` are threads of one CPU host: a peer's buffer is memory the
    /// task's own thread reads or writes (under the memory system's and the threads'
    /// limits), and a signal is a store, with no link in between.
    fn shares_memory(&self, a: usize, b: usize) -> bool {
        super::host_memory(self.topology, a, b)
    }

    /// What `rank`'s server's caches do for this operation ([`super::Caches`]); nothing
    /// where the server is no CPU host.
    fn caches(&self, rank: usize) -> super::Caches {
        self.host_of(rank)
            .map_or(super::Caches::NONE, |host| host.caches)
    }

    /// The processor of `rank`'s server, with its threads' resource.
    fn processor_of(&self, rank: usize) -> Option<(&'a Processor, ResourceId)> {
        let processor = self.topology.processor()?;
        Some((processor, self.host_of(rank)?.threads))
    }

    fn flush_finishes(&mut self) {
        for i in 0..self.finishes.len() {
            let f = self.finishes[i];
            self.schedule(f.at, What::Flow(f.flow, f.version));
        }
        self.finishes.clear();
    }

    /// The dense id of `notify`, allocated (clear) on first use.
    fn notify_index(&mut self, notify: NotifyId) -> u32 {
        let next = self.notifies.len() as u32;
        let id = *self.notify_ids.entry(notify).or_insert(next);
        if id == next {
            self.notifies.push(CLEAR);
        }
        id
    }

    /// The resource of the link direction `from -> to`, created on first use; `site` is
    /// the (rank, stream, task) that needs it, for the error.
    fn link(&mut self, from: usize, to: usize, site: Site) -> Result<LinkUse, CostError> {
        let key = (from as u32, to as u32);
        if let Some(l) = self.links.get(&key) {
            return Ok(*l);
        }
        let Some(spec) = self.topology.link(from, to) else {
            return Err(CostError::NoLink {
                rank: site.0,
                stream: site.1,
                task: site.2,
                peer: if from == site.0 { to } else { from },
                why: self.topology.link_status(from, to).refusal(),
            });
        };
        let l = LinkUse {
            resource: self.flows.add_resource(spec.bytes_per_s()),
            latency_s: spec.latency_s(),
            rdma: spec.kind == LinkKind::Rdma,
        };
        self.links.insert(key, l);
        Ok(l)
    }

    /// The (send, receive) resources of `rank`'s NIC, when NICs are shared: its own, or its
    /// server's ([`Topology::nic_of`]).
    fn nic(&mut self, rank: usize) -> Option<(ResourceId, ResourceId)> {
        let gbps = self.topology.nic_gbps()?;
        let nic = self.topology.nic_of(rank);
        if self.nic[nic].is_none() {
            let tx = self.flows.add_resource(gbps * 1e9);
            let rx = self.flows.add_resource(gbps * 1e9);
            self.nic[nic] = Some((tx, rx));
        }
        self.nic[nic]
    }

    /// The shared memory system of `rank`'s server, when the topology has one.
    fn memory(&mut self, rank: usize) -> Option<ResourceId> {
        let gbps = self.topology.memory_gbps()?;
        let server = self.topology.server_of(rank);
        let flows = &mut self.flows;
        Some(*self.memory[server].get_or_insert_with(|| flows.add_resource(gbps * 1e9)))
    }

    fn deadlock(&self) -> CostError {
        let stuck: Vec<&StreamState> = self
            .streams
            .iter()
            .filter(|st| (st.pc as usize) < st.tasks.len())
            .collect();
        let first = stuck[0];
        let task = &first.tasks[first.pc as usize];
        CostError::Deadlock {
            rank: first.rank as usize,
            stream: first.stream as usize,
            task: first.pc as usize,
            what: match task {
                Task::Wait { notify } => {
                    format!("waits on notify {} that is never posted", notify.index)
                }
                other => format!("{} never completes", other.kind_name()),
            },
            stuck: stuck.len(),
        }
    }
}

/// How a CPU host's server runs its ranks' tasks in one operation.
#[derive(Copy, Clone, Debug)]
struct HostServer {
    /// The threads its data tasks share: a resource of as many task-seconds per second
    /// as threads run them.
    threads: ResourceId,
    /// Every rank's program is small enough for the inline path: the submitting thread
    /// runs them all, one task after the other, with no wake-ups.
    inline: bool,
    /// What its caches do for the operation, from its footprint on the server.
    caches: super::Caches,
}

/// Per server, when the topology has a [`Processor`]: its threads (the workers, or the
/// one submitting thread on the inline path) as a resource of `flows`.
fn host_servers(
    programs: &[&RankProgram],
    topology: &Topology,
    flows: &mut Flows,
) -> Vec<Option<HostServer>> {
    let servers = topology.server_sizes().len();
    let Some(processor) = topology.processor() else {
        return vec![None; servers];
    };
    let limit = processor.inline_limit();
    let mut inline = vec![limit > 0; servers];
    for (rank, program) in programs.iter().enumerate() {
        if super::moved_bytes(program) > limit {
            inline[topology.server_of(rank)] = false;
        }
    }
    let ranks = topology.ranks();
    let owner = |rank: usize| (rank < ranks).then(|| topology.server_of(rank));
    let footprints = super::footprints(programs.iter().copied(), servers, owner);
    inline
        .into_iter()
        .zip(footprints)
        .map(|(inline, footprint)| {
            let threads = if inline { 1 } else { processor.workers };
            Some(HostServer {
                threads: flows.add_resource(threads as f64),
                inline,
                caches: super::Caches::of(processor, footprint),
            })
        })
        .collect()
}

/// Add `bytes` from `from` to `to`, merging with a transfer over the same direction.
fn add_transfer(list: &mut Vec<(usize, usize, usize)>, from: usize, to: usize, bytes: usize) {
    match list.iter_mut().find(|t| t.0 == from && t.1 == to) {
        Some(t) => t.2 += bytes,
        None => list.push((from, to, bytes)),
    }
}
