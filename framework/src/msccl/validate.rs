//! The format's rules, checked before translation; each failure names the file, line,
//! gpu, threadblock and step.
//!
//! What is checked here is what makes a file meaningless (it cannot be translated, or its
//! translation would deadlock by construction). Whether a well-formed file computes its
//! collective is the analyzer's question, asked of the translated programs like any
//! executor's.

use super::error::{FileError, Place};
use super::model::{Algorithm, BufName, Step, Threadblock};
use super::wiring::{sides, tb_index, Wiring};
use std::collections::{BTreeMap, VecDeque};

/// Check `algo` (read from `file`); its wiring (the messages paired) when it passes.
pub fn validate(file: &str, algo: &Algorithm) -> Result<Wiring, FileError> {
    let v = Validator { file, algo };
    v.header()?;
    for (g, gpu) in algo.gpus.iter().enumerate() {
        v.buffers(g)?;
        v.threadblocks(g, &gpu.tbs)?;
        for (t, tb) in gpu.tbs.iter().enumerate() {
            for (s, step) in tb.steps.iter().enumerate() {
                v.step(g, t, s, step)?;
            }
        }
    }
    v.balance()?;
    // Sends and receives balance: the messages can be paired.
    let wiring = super::wiring::wire(algo);
    v.acyclic(&wiring)?;
    Ok(wiring)
}

/// Chunks of the input and output a rank holds for the file's collective: the vector
/// (`nchunksperloop` chunks) for AllReduce, Broadcast and Reduce; one block of it per
/// rank on the side that has one block (AllGather's input, ReduceScatter's output).
pub fn buffer_chunks(algo: &Algorithm) -> (usize, usize) {
    let (i, o) = algo.coll.buffer_counts(1, algo.ngpus);
    let mult = i.max(o).max(1);
    (
        algo.nchunksperloop * i / mult,
        algo.nchunksperloop * o / mult,
    )
}

struct Validator<'a> {
    file: &'a str,
    algo: &'a Algorithm,
}

impl Validator<'_> {
    fn error(&self, place: Place, reason: impl Into<String>) -> FileError {
        FileError::new(self.file, place, reason)
    }

    fn header(&self) -> Result<(), FileError> {
        let a = self.algo;
        let at = Place::line(a.line);
        use crate::limits::{MAX_CHUNKS_PER_LOOP, MAX_LINK_CHANNELS, MAX_RANKS, MAX_SLAVE_STREAMS};
        let bounds = [
            ("nchunksperloop", a.nchunksperloop, MAX_CHUNKS_PER_LOOP),
            ("nchannels", a.nchannels, MAX_LINK_CHANNELS),
            ("ngpus", a.ngpus, MAX_RANKS),
        ];
        for (what, v, most) in bounds {
            if v == 0 || v > most {
                return Err(self.error(
                    at.clone(),
                    format!("{what}=\"{v}\": it must be 1 to {most}"),
                ));
            }
        }
        if let Some(g) = a.gpus.iter().find(|g| g.tbs.len() > MAX_SLAVE_STREAMS + 1) {
            return Err(self.error(
                Place::gpu(g.line, g.id),
                format!(
                    "{} threadblocks: a rank runs at most {} streams",
                    g.tbs.len(),
                    MAX_SLAVE_STREAMS + 1
                ),
            ));
        }
        if a.gpus.len() != a.ngpus {
            return Err(self.error(
                at,
                format!(
                    "ngpus=\"{}\" but the file has {} <gpu> elements",
                    a.ngpus,
                    a.gpus.len()
                ),
            ));
        }
        if let Some((i, g)) = a.gpus.iter().enumerate().find(|(i, g)| g.id != *i) {
            return Err(self.error(
                Place::gpu(g.line, g.id),
                format!(
                    "<gpu> number {i} has id {}; with ngpus=\"{}\" the ids must be 0..{} in order",
                    g.id, a.ngpus, a.ngpus
                ),
            ));
        }
        let (i, o) = a.coll.buffer_counts(1, a.ngpus);
        if i.max(o) > 1 && !a.nchunksperloop.is_multiple_of(a.ngpus) {
            return Err(self.error(
                at,
                format!(
                    "nchunksperloop=\"{}\" is not a multiple of ngpus=\"{}\": {} holds one block \
                     per rank, and every block must be whole chunks",
                    a.nchunksperloop, a.ngpus, a.coll
                ),
            ));
        }
        if a.coll.has_root() && a.root >= a.ngpus {
            return Err(self.error(
                at,
                format!("root=\"{}\" is not one of the {} gpus", a.root, a.ngpus),
            ));
        }
        Ok(())
    }

    /// The declared buffer sizes fit the collective's buffers.
    fn buffers(&self, g: usize) -> Result<(), FileError> {
        let gpu = &self.algo.gpus[g];
        let (i, o) = buffer_chunks(self.algo);
        for (name, declared, holds) in
            [("i_chunks", gpu.i_chunks, i), ("o_chunks", gpu.o_chunks, o)]
        {
            if declared > holds {
                return Err(self.error(
                    Place::gpu(gpu.line, g),
                    format!(
                        "{name}=\"{declared}\": chunks {holds}.. lie outside the buffer, which \
                         holds {holds} chunks for {} with nchunksperloop=\"{}\" on {} gpus",
                        self.algo.coll, self.algo.nchunksperloop, self.algo.ngpus
                    ),
                ));
            }
        }
        let most = crate::limits::MAX_CHUNKS_PER_LOOP;
        if gpu.s_chunks > most {
            return Err(self.error(
                Place::gpu(gpu.line, g),
                format!(
                    "s_chunks=\"{}\": a scratch of at most {most} chunks",
                    gpu.s_chunks
                ),
            ));
        }
        Ok(())
    }

    fn threadblocks(&self, g: usize, tbs: &[Threadblock]) -> Result<(), FileError> {
        let mut ids = BTreeMap::new();
        let mut owners: BTreeMap<(&str, usize, usize), usize> = BTreeMap::new();
        for tb in tbs {
            let at = Place::tb(tb.line, g, tb.id);
            if let Some(prev) = ids.insert(tb.id, tb.line) {
                return Err(self.error(
                    at,
                    format!(
                        "two threadblocks have id {} (the other on line {prev})",
                        tb.id
                    ),
                ));
            }
            if tb.chan >= self.algo.nchannels {
                return Err(self.error(
                    at,
                    format!(
                        "chan=\"{}\" but the algorithm has nchannels=\"{}\"",
                        tb.chan, self.algo.nchannels
                    ),
                ));
            }
            for (dir, peer) in [("send", tb.send), ("recv", tb.recv)] {
                let Some(peer) = peer else { continue };
                if peer >= self.algo.ngpus || peer == g {
                    return Err(self.error(
                        at,
                        format!(
                            "{dir}=\"{peer}\" is not another gpu (0..{})",
                            self.algo.ngpus
                        ),
                    ));
                }
                if let Some(other) = owners.insert((dir, tb.chan, peer), tb.id) {
                    let towards = if dir == "send" { "to" } else { "from" };
                    return Err(self.error(
                        at,
                        format!(
                            "channel {} {dir} {towards} gpu {peer} is owned by two threadblocks \
                             ({other} and {}); MSCCL gives each (channel, peer) one FIFO per \
                             direction",
                            tb.chan, tb.id
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn step(&self, g: usize, t: usize, s: usize, step: &Step) -> Result<(), FileError> {
        let gpu = &self.algo.gpus[g];
        let tb = &gpu.tbs[t];
        let at = Place::step(step.line, g, tb.id, step.s);
        if step.s != s {
            return Err(self.error(
                at,
                format!(
                    "s=\"{}\" but it is step {s} of its threadblock (steps are 0, 1, ...)",
                    step.s
                ),
            ));
        }
        if step.kind.sends() && tb.send.is_none() {
            return Err(self.error(
                at,
                format!(
                    "a `{}` step sends, but its threadblock has send=\"-1\"",
                    step.kind.name()
                ),
            ));
        }
        if step.kind.receives() && tb.recv.is_none() {
            return Err(self.error(
                at,
                format!(
                    "a `{}` step receives, but its threadblock has recv=\"-1\"",
                    step.kind.name()
                ),
            ));
        }
        if step.cnt == 0 && step.kind != super::model::StepKind::Nop {
            return Err(self.error(at, "cnt=\"0\": a step moves at least one chunk"));
        }
        let reads_dst = step.kind == super::model::StepKind::Reduce;
        let used = [
            (step.kind.reads_src(), "src", step.src),
            (step.kind.writes_dst() || reads_dst, "dst", step.dst),
        ];
        for (uses, side, chunk) in used {
            let holds = match chunk.buf {
                BufName::Input => gpu.i_chunks,
                BufName::Output => gpu.o_chunks,
                BufName::Scratch => gpu.s_chunks,
            };
            let end = chunk.off.checked_add(step.cnt);
            if uses && end.is_none_or(|end| end > holds) {
                return Err(self.error(
                    at,
                    format!(
                        "{side}buf=\"{}\" chunks {}..{} lie outside the buffer's {holds} chunks",
                        chunk.buf.letter(),
                        chunk.off,
                        chunk.off.saturating_add(step.cnt)
                    ),
                ));
            }
        }
        self.dependency(g, at, step)
    }

    fn dependency(&self, g: usize, at: Place, step: &Step) -> Result<(), FileError> {
        let Some((dep_tb, dep_step)) = step.dep else {
            return Ok(());
        };
        let gpu = &self.algo.gpus[g];
        let Some(t) = tb_index(self.algo, g, dep_tb) else {
            return Err(self.error(
                at,
                format!("depid=\"{dep_tb}\" is not a threadblock of gpu {g}"),
            ));
        };
        let Some(target) = gpu.tbs[t].steps.get(dep_step) else {
            return Err(self.error(
                at,
                format!("deps=\"{dep_step}\": threadblock {dep_tb} has no such step"),
            ));
        };
        if !target.hasdep {
            return Err(self.error(
                at,
                format!(
                    "depends on step {dep_step} of threadblock {dep_tb} (line {}), which does \
                     not say hasdep=\"1\"",
                    target.line
                ),
            ));
        }
        Ok(())
    }

    /// Sends and receives pair up, one for one and chunk for chunk, on every connection.
    fn balance(&self) -> Result<(), FileError> {
        let (sends, recvs) = sides(self.algo);
        let mut keys: Vec<(usize, usize, usize)> = sends.keys().copied().collect();
        keys.extend(recvs.keys().map(|&(c, to, from)| (c, from, to)));
        keys.sort_unstable();
        keys.dedup();
        for (chan, from, to) in keys {
            let empty = (usize::MAX, Vec::new());
            let (st, ss) = sends.get(&(chan, from, to)).unwrap_or(&empty);
            let (rt, rs) = recvs.get(&(chan, to, from)).unwrap_or(&empty);
            let place = |g: usize, t: usize, s: Option<usize>| {
                let gpu = &self.algo.gpus[g];
                match (gpu.tbs.get(t), s) {
                    (Some(tb), Some(s)) => Place::step(tb.steps[s].line, g, tb.id, s),
                    (Some(tb), None) => Place::tb(tb.line, g, tb.id),
                    (None, _) => Place::gpu(gpu.line, g),
                }
            };
            if ss.len() != rs.len() {
                let (g, t) = if *st != usize::MAX {
                    (from, *st)
                } else {
                    (to, *rt)
                };
                return Err(self.error(
                    place(g, t, None),
                    format!(
                        "sends and receives do not balance on channel {chan} from gpu {from} to \
                         gpu {to}: {} sending steps, {} receiving steps",
                        ss.len(),
                        rs.len()
                    ),
                ));
            }
            for (k, (&a, &b)) in ss.iter().zip(rs).enumerate() {
                let sent = self.algo.gpus[from].tbs[*st].steps[a].cnt;
                let got = self.algo.gpus[to].tbs[*rt].steps[b].cnt;
                if sent != got {
                    return Err(self.error(
                        place(to, *rt, Some(b)),
                        format!(
                            "sends and receives do not balance on channel {chan} from gpu {from} \
                             to gpu {to}: message {k} is sent with cnt=\"{sent}\" (step {a}) and \
                             received with cnt=\"{got}\""
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// No step waits, through threadblock order, dependencies and messages, for itself.
    fn acyclic(&self, wiring: &Wiring) -> Result<(), FileError> {
        let algo = self.algo;
        let mut index = BTreeMap::new();
        let mut nodes = Vec::new();
        for (g, gpu) in algo.gpus.iter().enumerate() {
            for (t, tb) in gpu.tbs.iter().enumerate() {
                for s in 0..tb.steps.len() {
                    index.insert((g, t, s), nodes.len());
                    nodes.push((g, t, s));
                }
            }
        }
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        let mut edge = |a: (usize, usize, usize), b: (usize, usize, usize)| {
            if let (Some(&x), Some(&y)) = (index.get(&a), index.get(&b)) {
                succ[x].push(y);
            }
        };
        for (g, gpu) in algo.gpus.iter().enumerate() {
            for (t, tb) in gpu.tbs.iter().enumerate() {
                for (s, step) in tb.steps.iter().enumerate() {
                    if s > 0 {
                        edge((g, t, s - 1), (g, t, s));
                    }
                    if let Some((dt, ds)) = step.dep {
                        if let Some(dt) = tb_index(algo, g, dt) {
                            edge((g, dt, ds), (g, t, s));
                        }
                    }
                }
            }
        }
        for c in &wiring.connections {
            for m in &c.messages {
                edge(
                    (c.from, c.send_tb, m.send_step),
                    (c.to, c.recv_tb, m.recv_step),
                );
            }
        }
        let mut indegree = vec![0usize; nodes.len()];
        for next in succ.iter().flatten() {
            indegree[*next] += 1;
        }
        let mut ready: VecDeque<usize> = (0..nodes.len()).filter(|&n| indegree[n] == 0).collect();
        let mut done = 0;
        while let Some(n) = ready.pop_front() {
            done += 1;
            for &m in &succ[n] {
                indegree[m] -= 1;
                if indegree[m] == 0 {
                    ready.push_back(m);
                }
            }
        }
        if done == nodes.len() {
            return Ok(());
        }
        let cycle = find_cycle(&succ, &indegree);
        let describe = |n: usize| {
            let (g, t, s) = nodes[n];
            format!("gpu {g} tb {} step {s}", algo.gpus[g].tbs[t].id)
        };
        let (g, t, s) = nodes[cycle[0]];
        let tb = &algo.gpus[g].tbs[t];
        let path: Vec<String> = cycle.iter().map(|&n| describe(n)).collect();
        Err(self.error(
            Place::step(tb.steps[s].line, g, tb.id, s),
            format!(
                "dependency cycle: {} -> {} (each must finish before the next can start, by \
                 threadblock order, depid/deps or a message)",
                path.join(" -> "),
                path[0]
            ),
        ))
    }
}

/// A cycle among the nodes Kahn's algorithm left (indegree still above 0), in edge order.
/// Every such node has a predecessor that is also left, so walking predecessors repeats a
/// node within `len` steps, and the walk from that node back to itself is a cycle.
fn find_cycle(succ: &[Vec<usize>], indegree: &[usize]) -> Vec<usize> {
    let left = |n: usize| indegree[n] > 0;
    let mut pred: Vec<Vec<usize>> = vec![Vec::new(); succ.len()];
    for (a, next) in succ.iter().enumerate() {
        for &b in next {
            pred[b].push(a);
        }
    }
    let Some(mut n) = (0..succ.len()).find(|&n| left(n)) else {
        return Vec::new();
    };
    let mut seen = vec![usize::MAX; succ.len()];
    let mut path = Vec::new();
    loop {
        if seen[n] != usize::MAX {
            let mut cycle = path[seen[n]..].to_vec();
            cycle.reverse();
            return cycle;
        }
        seen[n] = path.len();
        path.push(n);
        match pred[n].iter().copied().find(|&m| left(m)) {
            Some(m) => n = m,
            None => return path,
        }
    }
}
