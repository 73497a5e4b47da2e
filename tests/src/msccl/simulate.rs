//! A reference interpreter of MSCCL-IR files, written from the format's definition, to
//! prove files right or wrong without the importer.
//!
//! [`check`] reads a file (with `roxmltree`), checks the format's rules, then executes it
//! symbolically: every chunk of every buffer holds the multiset of (rank, input chunk)
//! contributions it is the reduction of (or is undefined), messages travel through one
//! FIFO per (channel, sender, receiver), and each step waits for the previous step of its
//! threadblock, its dependency and (receiving steps) its message. At the end the output
//! of every rank must be what the collective defines.
//!
//! "In any valid order": the steps form a graph (threadblock order, dependencies, and
//! the k-th send of a connection before its k-th receive) that does not depend on the
//! order of execution. Every execution is a topological order of it, and every access to
//! a chunk is checked against the graph's happens-before relation (vector clocks, one
//! component per threadblock): two accesses to the same chunk of the same gpu, one of
//! them a write, that the graph does not order are a race. A file without races computes
//! the same thing in every order, so one execution decides; [`Options::seeds`] runs
//! more, in random orders, and compares them all the same.
//!
//! Errors carry a [`ErrorKind`] whose keyword (the importer's, for the rules) their
//! message contains.

use super::xml::{Buf, Ty};
use super::Coll;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;

/// What is wrong.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    // The format's rules (the importer's keywords).
    Malformed,
    UnknownStepType,
    TwoOwners,
    Unbalanced,
    Hasdep,
    Cycle,
    Outside,
    Ngpus,
    /// Any other rule: ids, peers, channels, buffer sizes, destinations of sends.
    Invalid,
    /// With [`Options::fifo_capacity`]: the file deadlocks when a FIFO holds that many
    /// messages.
    Deadlock,
    // What a well-formed file computes, in the order reported.
    Race,
    DoubleCounted,
    WritesInput,
    Undefined,
    WrongResult,
}

impl ErrorKind {
    /// The keyword the error's message contains.
    pub fn keyword(self) -> &'static str {
        match self {
            ErrorKind::Malformed => "malformed",
            ErrorKind::UnknownStepType => "unknown step type",
            ErrorKind::TwoOwners => "owned by two threadblocks",
            ErrorKind::Unbalanced => "do not balance",
            ErrorKind::Hasdep => "hasdep",
            ErrorKind::Cycle => "cycle",
            ErrorKind::Outside => "outside",
            ErrorKind::Ngpus => "ngpus",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Deadlock => "deadlock",
            ErrorKind::Race => "race",
            ErrorKind::DoubleCounted => "double-counted",
            ErrorKind::WritesInput => "writes an input",
            ErrorKind::Undefined => "undefined",
            ErrorKind::WrongResult => "wrong result",
        }
    }
}

/// An error: its kind, and a message that starts with the kind's keyword.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError {
    pub kind: ErrorKind,
    pub message: String,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SimError {}

fn error(kind: ErrorKind, detail: impl fmt::Display) -> SimError {
    SimError {
        kind,
        message: format!("{}: {detail}", kind.keyword()),
    }
}

/// A file as read.
#[derive(Clone, Debug)]
pub struct Algo {
    pub name: String,
    pub coll: Coll,
    pub ngpus: usize,
    pub nchannels: usize,
    pub nchunksperloop: usize,
    pub inplace: bool,
    pub root: usize,
    pub gpus: Vec<Gpu>,
}

#[derive(Clone, Debug)]
pub struct Gpu {
    pub id: usize,
    pub i_chunks: usize,
    pub o_chunks: usize,
    pub s_chunks: usize,
    pub tbs: Vec<Tb>,
}

#[derive(Clone, Debug)]
pub struct Tb {
    pub id: usize,
    /// -1: none.
    pub send: i64,
    pub recv: i64,
    pub chan: usize,
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug)]
pub struct Step {
    pub s: usize,
    pub ty: Ty,
    pub src: (Buf, usize),
    pub dst: (Buf, usize),
    pub cnt: usize,
    /// (depid, deps), or None for -1 -1.
    pub dep: Option<(usize, usize)>,
    pub hasdep: bool,
}

impl Algo {
    fn chunks(&self, g: usize, buf: Buf) -> usize {
        let gpu = &self.gpus[g];
        match buf {
            Buf::I => gpu.i_chunks,
            Buf::O => gpu.o_chunks,
            Buf::S => gpu.s_chunks,
        }
    }
}

/// Reads a file; checks only what reading needs.
pub fn parse(text: &str) -> Result<Algo, SimError> {
    use ErrorKind::*;
    let doc =
        roxmltree::Document::parse(text).map_err(|e| error(Malformed, format!("XML: {e}")))?;
    let algo = doc.root_element();
    if algo.tag_name().name() != "algo" {
        return Err(error(Malformed, "the root element is not <algo>"));
    }
    let attr = |node: roxmltree::Node<'_, '_>, name: &str| -> Result<String, SimError> {
        node.attribute(name).map(str::to_string).ok_or_else(|| {
            error(
                Malformed,
                format!("<{}> has no {name}", node.tag_name().name()),
            )
        })
    };
    let int = |node: roxmltree::Node<'_, '_>, name: &str| -> Result<i64, SimError> {
        let text = attr(node, name)?;
        text.parse::<i64>()
            .ok()
            .filter(|&v| v >= -1)
            .ok_or_else(|| error(Malformed, format!("{name}=\"{text}\" is not a number")))
    };
    let count = |node: roxmltree::Node<'_, '_>, name: &str| -> Result<usize, SimError> {
        let v = int(node, name)?;
        usize::try_from(v).map_err(|_| error(Malformed, format!("{name}=\"{v}\" is negative")))
    };
    let flag = |node: roxmltree::Node<'_, '_>, name: &str| -> Result<bool, SimError> {
        match attr(node, name)?.as_str() {
            "0" => Ok(false),
            "1" => Ok(true),
            other => Err(error(
                Malformed,
                format!("{name}=\"{other}\" is not 0 or 1"),
            )),
        }
    };
    let coll_text = attr(algo, "coll")?;
    let coll = Coll::from_attr(&coll_text)
        .ok_or_else(|| error(Invalid, format!("coll=\"{coll_text}\" is not a collective")))?;
    let mut gpus = Vec::new();
    for gpu in elements(algo, "gpu")? {
        let mut tbs = Vec::new();
        for tb in elements(gpu, "tb")? {
            let mut steps = Vec::new();
            for step in elements(tb, "step")? {
                let name = attr(step, "type")?;
                let ty = Ty::from_code(&name).ok_or_else(|| {
                    error(
                        UnknownStepType,
                        format!("\"{name}\" (step {:?})", step.attribute("s")),
                    )
                })?;
                let buf = |name: &str| -> Result<Buf, SimError> {
                    let code = attr(step, name)?;
                    Buf::from_code(&code).ok_or_else(|| {
                        error(Malformed, format!("{name}=\"{code}\" is not i, o or s"))
                    })
                };
                let depid = int(step, "depid")?;
                let deps = int(step, "deps")?;
                let dep = match (depid, deps) {
                    (-1, -1) => None,
                    (t, s) if t >= 0 && s >= 0 => Some((t as usize, s as usize)),
                    _ => {
                        return Err(error(
                            Invalid,
                            format!("depid=\"{depid}\" deps=\"{deps}\": both or neither"),
                        ))
                    }
                };
                steps.push(Step {
                    s: count(step, "s")?,
                    ty,
                    src: (buf("srcbuf")?, count(step, "srcoff")?),
                    dst: (buf("dstbuf")?, count(step, "dstoff")?),
                    cnt: count(step, "cnt")?,
                    dep,
                    hasdep: flag(step, "hasdep")?,
                });
            }
            tbs.push(Tb {
                id: count(tb, "id")?,
                send: int(tb, "send")?,
                recv: int(tb, "recv")?,
                chan: count(tb, "chan")?,
                steps,
            });
        }
        gpus.push(Gpu {
            id: count(gpu, "id")?,
            i_chunks: count(gpu, "i_chunks")?,
            o_chunks: count(gpu, "o_chunks")?,
            s_chunks: count(gpu, "s_chunks")?,
            tbs,
        });
    }
    let root = match algo.attribute("root") {
        Some(_) => count(algo, "root")?,
        None => 0,
    };
    Ok(Algo {
        name: attr(algo, "name")?,
        coll,
        ngpus: count(algo, "ngpus")?,
        nchannels: count(algo, "nchannels")?,
        nchunksperloop: count(algo, "nchunksperloop")?,
        inplace: flag(algo, "inplace")?,
        root,
        gpus,
    })
}

/// The element children of `node`, which must all be `<tag>`.
fn elements<'a, 'i>(
    node: roxmltree::Node<'a, 'i>,
    tag: &'static str,
) -> Result<Vec<roxmltree::Node<'a, 'i>>, SimError> {
    let children: Vec<_> = node.children().filter(|c| c.is_element()).collect();
    match children.iter().find(|c| c.tag_name().name() != tag) {
        Some(c) => Err(error(
            ErrorKind::Malformed,
            format!(
                "<{}> inside <{}>",
                c.tag_name().name(),
                node.tag_name().name()
            ),
        )),
        None => Ok(children),
    }
}

/// A step's place, for messages.
fn place(algo: &Algo, (g, t, s): (usize, usize, usize)) -> String {
    format!("gpu {g} tb {} step {s}", algo.gpus[g].tbs[t].id)
}

/// A connection: (channel, sender, receiver).
type Link = (usize, usize, usize);

/// The checked graph of a file's steps.
struct Net {
    /// (gpu, tb index, step index) of every node.
    nodes: Vec<(usize, usize, usize)>,
    /// Happens-before predecessors of every node (tb order, dependency, message).
    preds: Vec<Vec<usize>>,
    /// Every connection (chan, from, to) with its sending and receiving nodes, in order.
    links: Vec<(Link, Vec<usize>, Vec<usize>)>,
    /// Global threadblock number of every node (for vector clocks).
    thread: Vec<usize>,
    threads: usize,
}

impl Net {
    fn step<'a>(&self, algo: &'a Algo, n: usize) -> &'a Step {
        let (g, t, s) = self.nodes[n];
        &algo.gpus[g].tbs[t].steps[s]
    }
}

/// Checks the format's rules, and builds the graph.
fn validate(algo: &Algo) -> Result<Net, SimError> {
    use ErrorKind::*;
    let n = algo.ngpus;
    if algo.gpus.len() != n {
        return Err(error(
            Ngpus,
            format!(
                "ngpus=\"{n}\" but there are {} <gpu> elements",
                algo.gpus.len()
            ),
        ));
    }
    if let Some((k, g)) = algo.gpus.iter().enumerate().find(|(k, g)| g.id != *k) {
        return Err(error(Ngpus, format!("<gpu> {k} has id {}", g.id)));
    }
    if algo.inplace {
        return Err(error(Invalid, "in-place files are not simulated"));
    }
    let k = algo.nchunksperloop;
    if algo.nchannels == 0 || k == 0 {
        return Err(error(Invalid, "nchannels and nchunksperloop start at 1"));
    }
    if algo.coll.blocked() && !k.is_multiple_of(n) {
        return Err(error(
            Invalid,
            format!("nchunksperloop={k} is not a multiple of ngpus={n}"),
        ));
    }
    if algo.coll.rooted() && algo.root >= n {
        return Err(error(Invalid, format!("root {} of {n} gpus", algo.root)));
    }
    let (want_i, want_o) = (algo.coll.in_chunks(k, n), algo.coll.out_chunks(k, n));
    for gpu in &algo.gpus {
        if gpu.i_chunks != want_i || gpu.o_chunks != want_o {
            return Err(error(
                Invalid,
                format!(
                    "gpu {} has i_chunks={} o_chunks={}; {:?} with nchunksperloop={k} on {n} \
                     gpus has {want_i} and {want_o}",
                    gpu.id, gpu.i_chunks, gpu.o_chunks, algo.coll
                ),
            ));
        }
    }
    // Contributions are packed into a u32 as rank << 20 | input chunk (see
    // `contribution`): more would wrap into another rank's bits.
    if n > 1 << 12 || want_i > 1 << 20 {
        return Err(error(
            Invalid,
            format!(
                "{n} gpus of {want_i} input chunks: the interpreter holds at most 4096 gpus \
                 of 2^20 input chunks"
            ),
        ));
    }
    // Threadblocks: ids, channels, peers, owners.
    for (g, gpu) in algo.gpus.iter().enumerate() {
        let mut owners: HashMap<(&str, usize, i64), usize> = HashMap::new();
        for (t, tb) in gpu.tbs.iter().enumerate() {
            if tb.id != t {
                return Err(error(
                    Invalid,
                    format!("gpu {g}: <tb> {t} has id {}", tb.id),
                ));
            }
            if tb.chan >= algo.nchannels {
                return Err(error(
                    Invalid,
                    format!("gpu {g} tb {t}: chan {} of {}", tb.chan, algo.nchannels),
                ));
            }
            for (dir, peer) in [("send", tb.send), ("recv", tb.recv)] {
                if peer == -1 {
                    continue;
                }
                if peer < 0 || peer as usize >= n || peer as usize == g {
                    return Err(error(Invalid, format!("gpu {g} tb {t}: {dir}={peer}")));
                }
                if let Some(other) = owners.insert((dir, tb.chan, peer), t) {
                    return Err(error(
                        TwoOwners,
                        format!(
                            "gpu {g}: channel {} {dir} peer {peer} is owned by two \
                             threadblocks, {other} and {t}",
                            tb.chan
                        ),
                    ));
                }
            }
            for (s, step) in tb.steps.iter().enumerate() {
                let at = place(algo, (g, t, s));
                if step.s != s {
                    return Err(error(Invalid, format!("{at} has s={}", step.s)));
                }
                if step.ty.sends() && tb.send == -1 {
                    return Err(error(Invalid, format!("{at} sends but its tb has send=-1")));
                }
                if step.ty.receives() && tb.recv == -1 {
                    return Err(error(
                        Invalid,
                        format!("{at} receives but its tb has recv=-1"),
                    ));
                }
                if step.ty != Ty::Nop && step.cnt == 0 {
                    return Err(error(Invalid, format!("{at} has cnt=0")));
                }
            }
        }
    }
    // Ranges of the buffers a step reads or writes here.
    for (g, gpu) in algo.gpus.iter().enumerate() {
        for (t, tb) in gpu.tbs.iter().enumerate() {
            for (s, step) in tb.steps.iter().enumerate() {
                let local_src = matches!(
                    step.ty,
                    Ty::S | Ty::Rrs | Ty::Rrc | Ty::Rrcs | Ty::Cpy | Ty::Re
                );
                let local_dst = matches!(
                    step.ty,
                    Ty::R | Ty::Rcs | Ty::Rrc | Ty::Rrcs | Ty::Cpy | Ty::Re
                );
                for (used, side, (buf, off)) in
                    [(local_src, "src", step.src), (local_dst, "dst", step.dst)]
                {
                    let size = algo.chunks(g, buf);
                    if used && off + step.cnt > size {
                        return Err(error(
                            Outside,
                            format!(
                                "{}: {side} {}[{off}..{}] lies outside the buffer of {size} chunks",
                                place(algo, (g, t, s)),
                                buf.code(),
                                off + step.cnt
                            ),
                        ));
                    }
                }
            }
        }
    }
    // Dependencies and hasdep.
    for (g, gpu) in algo.gpus.iter().enumerate() {
        let mut depended = BTreeSet::new();
        for (t, tb) in gpu.tbs.iter().enumerate() {
            for (s, step) in tb.steps.iter().enumerate() {
                let Some((dt, ds)) = step.dep else { continue };
                let at = place(algo, (g, t, s));
                let Some(target) = gpu.tbs.get(dt).and_then(|tb| tb.steps.get(ds)) else {
                    return Err(error(
                        Invalid,
                        format!("{at} depends on missing tb {dt} step {ds}"),
                    ));
                };
                if !target.hasdep {
                    return Err(error(
                        Hasdep,
                        format!("{at} depends on tb {dt} step {ds}, which has hasdep=0"),
                    ));
                }
                depended.insert((dt, ds));
            }
        }
        for (t, tb) in gpu.tbs.iter().enumerate() {
            for (s, step) in tb.steps.iter().enumerate() {
                if step.hasdep && !depended.contains(&(t, s)) {
                    return Err(error(
                        Hasdep,
                        format!(
                            "{} has hasdep=1 but no step depends on it",
                            place(algo, (g, t, s))
                        ),
                    ));
                }
            }
        }
    }
    // Nodes.
    let mut nodes = Vec::new();
    let mut base = Vec::new();
    let mut thread = Vec::new();
    let mut threads = 0;
    for (g, gpu) in algo.gpus.iter().enumerate() {
        let mut b = Vec::new();
        for (t, tb) in gpu.tbs.iter().enumerate() {
            b.push(nodes.len());
            for s in 0..tb.steps.len() {
                nodes.push((g, t, s));
                thread.push(threads);
            }
            threads += 1;
        }
        base.push(b);
    }
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (x, &(g, t, s)) in nodes.iter().enumerate() {
        if s > 0 {
            preds[x].push(x - 1);
        }
        if let Some((dt, ds)) = algo.gpus[g].tbs[t].steps[s].dep {
            preds[x].push(base[g][dt] + ds);
        }
    }
    // Connections: the k-th send pairs with the k-th receive.
    let mut by_link: HashMap<Link, (Vec<usize>, Vec<usize>)> = HashMap::new();
    for (x, &(g, t, s)) in nodes.iter().enumerate() {
        let tb = &algo.gpus[g].tbs[t];
        let ty = tb.steps[s].ty;
        if ty.sends() {
            by_link
                .entry((tb.chan, g, tb.send as usize))
                .or_default()
                .0
                .push(x);
        }
        if ty.receives() {
            by_link
                .entry((tb.chan, tb.recv as usize, g))
                .or_default()
                .1
                .push(x);
        }
    }
    let mut links: Vec<_> = by_link.into_iter().map(|(k, (s, r))| (k, s, r)).collect();
    links.sort();
    let step = |x: usize| {
        let (g, t, s) = nodes[x];
        &algo.gpus[g].tbs[t].steps[s]
    };
    for ((chan, from, to), sends, recvs) in &links {
        if sends.len() != recvs.len() {
            return Err(error(
                Unbalanced,
                format!(
                    "sends and receives on channel {chan} from gpu {from} to gpu {to} do not \
                     balance: {} sends, {} receives",
                    sends.len(),
                    recvs.len()
                ),
            ));
        }
        for (k, (&a, &b)) in sends.iter().zip(recvs).enumerate() {
            let (sa, sb) = (step(a), step(b));
            let both = format!(
                "message {k} on channel {chan} from gpu {from} to gpu {to} ({} to {})",
                place(algo, nodes[a]),
                place(algo, nodes[b])
            );
            if sa.cnt != sb.cnt {
                return Err(error(
                    Unbalanced,
                    format!(
                        "{both}: sent cnt={} and received cnt={}; the two sides do not balance",
                        sa.cnt, sb.cnt
                    ),
                ));
            }
            if sa.dst != sb.dst {
                return Err(error(
                    Invalid,
                    format!(
                        "{both}: the send names destination {}[{}], the receive stores to {}[{}]",
                        sa.dst.0.code(),
                        sa.dst.1,
                        sb.dst.0.code(),
                        sb.dst.1
                    ),
                ));
            }
            preds[b].push(a);
        }
    }
    if let Some(stuck) = unsorted(&preds, &[]) {
        let names: Vec<String> = stuck
            .iter()
            .take(4)
            .map(|&x| place(algo, nodes[x]))
            .collect();
        return Err(error(
            Cycle,
            format!(
                "dependency cycle: {} steps wait for each other through threadblock order, \
                 dependencies and messages, among them {}",
                stuck.len(),
                names.join(", ")
            ),
        ));
    }
    Ok(Net {
        nodes,
        preds,
        links,
        thread,
        threads,
    })
}

/// The nodes a topological sort cannot reach (None: every node is reached), with `extra`
/// edges (from, to) added.
fn unsorted(preds: &[Vec<usize>], extra: &[(usize, usize)]) -> Option<Vec<usize>> {
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); preds.len()];
    let mut indegree = vec![0usize; preds.len()];
    for (x, ps) in preds.iter().enumerate() {
        for &p in ps {
            succ[p].push(x);
            indegree[x] += 1;
        }
    }
    for &(a, b) in extra {
        succ[a].push(b);
        indegree[b] += 1;
    }
    let mut ready: Vec<usize> = (0..preds.len()).filter(|&x| indegree[x] == 0).collect();
    let mut done = 0;
    while let Some(x) = ready.pop() {
        done += 1;
        for &y in &succ[x] {
            indegree[y] -= 1;
            if indegree[y] == 0 {
                ready.push(y);
            }
        }
    }
    (done < preds.len()).then(|| (0..preds.len()).filter(|&x| indegree[x] > 0).collect())
}

/// How to check.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Besides the first execution (threadblocks in turn), one in a random order per seed;
    /// all must compute the same.
    pub seeds: Vec<u64>,
    /// Also require that the file cannot deadlock when every FIFO holds this many
    /// messages (a send waits for the receive `capacity` messages back).
    pub fifo_capacity: Option<usize>,
}

/// What a correct file did.
#[derive(Clone, Debug)]
pub struct Report {
    pub name: String,
    pub coll: Coll,
    pub ngpus: usize,
    pub nchannels: usize,
    pub steps: usize,
    pub messages: usize,
    pub threadblocks: usize,
    pub max_tbs_per_gpu: usize,
    pub step_types: BTreeSet<Ty>,
    /// Whether some step depends on a step of another threadblock.
    pub cross_tb_deps: bool,
    /// Whether some step reads or writes scratch.
    pub uses_scratch: bool,
    /// Accesses to buffers the collective leaves unused (a non-root's input in Broadcast
    /// and Scatter, its output in Reduce and Gather).
    pub unused_touched: Vec<String>,
}

/// [`check_with`] with the default options.
pub fn check(text: &str) -> Result<Report, SimError> {
    check_with(text, &Options::default())
}

/// Reads, validates and executes a file, and checks its outputs.
pub fn check_with(text: &str, options: &Options) -> Result<Report, SimError> {
    let algo = parse(text)?;
    let net = validate(&algo)?;
    if let Some(cap) = options.fifo_capacity {
        let mut extra = Vec::new();
        for (_, sends, recvs) in &net.links {
            for j in cap.max(1)..sends.len() {
                extra.push((recvs[j - cap.max(1)], sends[j]));
            }
        }
        if let Some(stuck) = unsorted(&net.preds, &extra) {
            let names: Vec<String> = stuck
                .iter()
                .take(4)
                .map(|&x| place(&algo, net.nodes[x]))
                .collect();
            return Err(error(
                ErrorKind::Deadlock,
                format!(
                    "with {cap} message(s) a FIFO, {} steps never run, among them {}",
                    stuck.len(),
                    names.join(", ")
                ),
            ));
        }
    }
    let clocks = vector_clocks(&net);
    let first = execute(&algo, &net, &clocks, None);
    let mut errors = first.errors.clone();
    for &seed in &options.seeds {
        let other = execute(&algo, &net, &clocks, Some(seed));
        errors.extend(other.errors.iter().cloned());
        if errors.is_empty() && other.outputs != first.outputs {
            errors.push(error(
                ErrorKind::Race,
                format!("the outputs of two execution orders differ (seed {seed})"),
            ));
        }
    }
    errors.extend(check_outputs(&algo, &first.outputs));
    if let Some(e) = errors.into_iter().min_by_key(|e| e.kind) {
        return Err(e);
    }
    let mut step_types = BTreeSet::new();
    let mut cross_tb_deps = false;
    let mut uses_scratch = false;
    for gpu in &algo.gpus {
        for (t, tb) in gpu.tbs.iter().enumerate() {
            for step in &tb.steps {
                step_types.insert(step.ty);
                cross_tb_deps |= step.dep.is_some_and(|(dt, _)| dt != t);
                uses_scratch |=
                    step.ty != Ty::Nop && (step.src.0 == Buf::S || step.dst.0 == Buf::S);
            }
        }
    }
    Ok(Report {
        name: algo.name.clone(),
        coll: algo.coll,
        ngpus: algo.ngpus,
        nchannels: algo.nchannels,
        steps: net.nodes.len(),
        messages: net.links.iter().map(|l| l.1.len()).sum(),
        threadblocks: net.threads,
        max_tbs_per_gpu: algo.gpus.iter().map(|g| g.tbs.len()).max().unwrap_or(0),
        step_types,
        cross_tb_deps,
        uses_scratch,
        unused_touched: first.unused_touched,
    })
}

/// Vector clocks of every node, `threads` components each: the join of its
/// predecessors', with its own threadblock's component its index + 1.
fn vector_clocks(net: &Net) -> Vec<u32> {
    let w = net.threads;
    let mut vc = vec![0u32; net.nodes.len() * w];
    let order = topological(net, None);
    for &x in &order {
        let mut row = vec![0u32; w];
        for &p in &net.preds[x] {
            for (a, b) in row.iter_mut().zip(&vc[p * w..(p + 1) * w]) {
                *a = (*a).max(*b);
            }
        }
        row[net.thread[x]] = net.nodes[x].2 as u32 + 1;
        vc[x * w..(x + 1) * w].copy_from_slice(&row);
    }
    vc
}

/// A topological order of the graph: the lowest ready node first, or a random ready node
/// when seeded.
fn topological(net: &Net, seed: Option<u64>) -> Vec<usize> {
    let len = net.nodes.len();
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); len];
    let mut indegree = vec![0usize; len];
    for (x, ps) in net.preds.iter().enumerate() {
        for &p in ps {
            succ[p].push(x);
            indegree[x] += 1;
        }
    }
    let mut ready: BTreeSet<usize> = (0..len).filter(|&x| indegree[x] == 0).collect();
    let mut rng = seed.map(|s| s.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut order = Vec::with_capacity(len);
    while !ready.is_empty() {
        let x = match rng.as_mut() {
            None => *ready.iter().next().unwrap(),
            Some(state) => {
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                *ready
                    .iter()
                    .nth((*state % ready.len() as u64) as usize)
                    .unwrap()
            }
        };
        ready.remove(&x);
        order.push(x);
        for &y in &succ[x] {
            indegree[y] -= 1;
            if indegree[y] == 0 {
                ready.insert(y);
            }
        }
    }
    assert_eq!(order.len(), len, "validate() rejects cycles");
    order
}

/// The contents of a chunk: the sorted multiset of contributions (rank << 20 | input
/// chunk), or None when undefined.
type Val = Option<Vec<u32>>;

fn contribution(rank: usize, chunk: usize) -> u32 {
    ((rank as u32) << 20) | chunk as u32
}

fn describe(v: &Val) -> String {
    match v {
        None => "undefined".to_string(),
        Some(c) => {
            let items: Vec<String> = c
                .iter()
                .map(|x| format!("{}.{}", x >> 20, x & 0xFFFFF))
                .collect();
            format!("{{{}}}", items.join(" "))
        }
    }
}

/// The last write and the reads since, of one chunk: (thread, clock, node).
#[derive(Clone, Default)]
struct Shadow {
    write: Option<(usize, u32, usize)>,
    reads: Vec<(usize, u32, usize)>,
}

struct Run<'a> {
    algo: &'a Algo,
    net: &'a Net,
    clocks: &'a [u32],
    /// [gpu][buf] chunks.
    mem: Vec<[Vec<Val>; 3]>,
    shadow: Vec<[Vec<Shadow>; 3]>,
    errors: Vec<SimError>,
    unused_touched: Vec<String>,
}

struct Outcome {
    outputs: Vec<Vec<Val>>,
    errors: Vec<SimError>,
    unused_touched: Vec<String>,
}

fn slot(buf: Buf) -> usize {
    match buf {
        Buf::I => 0,
        Buf::O => 1,
        Buf::S => 2,
    }
}

impl Run<'_> {
    fn ordered(&self, (thread, clock, _): (usize, u32, usize), node: usize) -> bool {
        clock <= self.clocks[node * self.net.threads + thread]
    }

    /// Whether fewer than eight errors of `kind` are reported yet (more would only repeat).
    fn room(&self, kind: ErrorKind) -> bool {
        self.errors.iter().filter(|e| e.kind == kind).count() < 8
    }

    fn race(&mut self, node: usize, other: usize, what: &str, g: usize, buf: Buf, off: usize) {
        if self.room(ErrorKind::Race) {
            let a = place(self.algo, self.net.nodes[other]);
            let b = place(self.algo, self.net.nodes[node]);
            self.errors.push(error(
                ErrorKind::Race,
                format!(
                    "{what} of gpu {g} {}[{off}] by {a} and {b}, which no dependency orders",
                    buf.code()
                ),
            ));
        }
    }

    fn touch_unused(&mut self, node: usize, g: usize, buf: Buf) {
        let algo = self.algo;
        let unused = g != algo.root
            && match algo.coll {
                Coll::Broadcast | Coll::Scatter => buf == Buf::I,
                Coll::Reduce | Coll::Gather => buf == Buf::O,
                _ => false,
            };
        if unused && self.unused_touched.len() < 8 {
            let at = place(algo, self.net.nodes[node]);
            self.unused_touched
                .push(format!("{at} touches {} of non-root gpu {g}", buf.code()));
        }
    }

    fn read(&mut self, node: usize, g: usize, (buf, off): (Buf, usize), cnt: usize) -> Vec<Val> {
        self.touch_unused(node, g, buf);
        let thread = self.net.thread[node];
        let clock = self.net.nodes[node].2 as u32 + 1;
        let mut out = Vec::with_capacity(cnt);
        for c in off..off + cnt {
            let sh = &self.shadow[g][slot(buf)][c];
            if let Some(w) = sh.write {
                if !self.ordered(w, node) {
                    self.race(node, w.2, "a write and a read", g, buf, c);
                }
            }
            let sh = &mut self.shadow[g][slot(buf)][c];
            sh.reads.retain(|r| r.0 != thread);
            sh.reads.push((thread, clock, node));
            let v = self.mem[g][slot(buf)][c].clone();
            if v.is_none() && self.room(ErrorKind::Undefined) {
                self.errors.push(error(
                    ErrorKind::Undefined,
                    format!(
                        "{} reads gpu {g} {}[{c}] before anything is stored there",
                        place(self.algo, self.net.nodes[node]),
                        buf.code()
                    ),
                ));
            }
            out.push(v);
        }
        out
    }

    fn write(&mut self, node: usize, g: usize, (buf, off): (Buf, usize), vals: Vec<Val>) {
        self.touch_unused(node, g, buf);
        if buf == Buf::I {
            self.errors.push(error(
                ErrorKind::WritesInput,
                format!(
                    "{} writes gpu {g}'s input",
                    place(self.algo, self.net.nodes[node])
                ),
            ));
        }
        let thread = self.net.thread[node];
        let clock = self.net.nodes[node].2 as u32 + 1;
        for (k, v) in vals.into_iter().enumerate() {
            let c = off + k;
            let sh = std::mem::take(&mut self.shadow[g][slot(buf)][c]);
            if let Some(w) = sh.write {
                if !self.ordered(w, node) {
                    self.race(node, w.2, "two writes", g, buf, c);
                }
            }
            for &r in &sh.reads {
                if !self.ordered(r, node) {
                    self.race(node, r.2, "a read and a write", g, buf, c);
                }
            }
            self.shadow[g][slot(buf)][c] = Shadow {
                write: Some((thread, clock, node)),
                reads: Vec::new(),
            };
            self.mem[g][slot(buf)][c] = v;
        }
    }

    fn reduce(&mut self, node: usize, a: Vec<Val>, b: Vec<Val>) -> Vec<Val> {
        a.into_iter()
            .zip(b)
            .map(|(x, y)| {
                let (x, y) = (x?, y?);
                let mut both = Vec::with_capacity(x.len() + y.len());
                both.extend_from_slice(&x);
                both.extend_from_slice(&y);
                both.sort_unstable();
                if let Some(w) = both.windows(2).find(|w| w[0] == w[1]) {
                    if self.room(ErrorKind::DoubleCounted) {
                        self.errors.push(error(
                            ErrorKind::DoubleCounted,
                            format!(
                                "{} reduces {} with {}: contribution {}.{} is double-counted",
                                place(self.algo, self.net.nodes[node]),
                                describe(&Some(x.clone())),
                                describe(&Some(y.clone())),
                                w[0] >> 20,
                                w[0] & 0xFFFFF
                            ),
                        ));
                    }
                }
                Some(both)
            })
            .collect()
    }
}

/// One execution in a topological order (the lowest ready step first, or random when
/// seeded).
fn execute(algo: &Algo, net: &Net, clocks: &[u32], seed: Option<u64>) -> Outcome {
    let n = algo.ngpus;
    let mut run = Run {
        algo,
        net,
        clocks,
        mem: Vec::with_capacity(n),
        shadow: Vec::with_capacity(n),
        errors: Vec::new(),
        unused_touched: Vec::new(),
    };
    for (g, gpu) in algo.gpus.iter().enumerate() {
        let input_defined = match algo.coll {
            Coll::Broadcast | Coll::Scatter => g == algo.root,
            _ => true,
        };
        let input = (0..gpu.i_chunks)
            .map(|c| input_defined.then(|| vec![contribution(g, c)]))
            .collect();
        run.mem
            .push([input, vec![None; gpu.o_chunks], vec![None; gpu.s_chunks]]);
        run.shadow.push([
            vec![Shadow::default(); gpu.i_chunks],
            vec![Shadow::default(); gpu.o_chunks],
            vec![Shadow::default(); gpu.s_chunks],
        ]);
    }
    // One FIFO per connection: (sending node, values).
    let mut fifos: HashMap<Link, VecDeque<(usize, Vec<Val>)>> = HashMap::new();
    let mut partner: HashMap<usize, usize> = HashMap::new();
    for (_, sends, recvs) in &net.links {
        for (&a, &b) in sends.iter().zip(recvs) {
            partner.insert(b, a);
        }
    }
    for x in topological(net, seed) {
        let (g, t, _) = net.nodes[x];
        let tb = &algo.gpus[g].tbs[t];
        let step = net.step(algo, x);
        let cnt = step.cnt;
        let mut incoming = || {
            let key = (tb.chan, tb.recv as usize, g);
            let (from, vals) = fifos
                .get_mut(&key)
                .and_then(VecDeque::pop_front)
                .expect("a receive runs after its send");
            assert_eq!(
                Some(&from),
                partner.get(&x),
                "FIFO order is the matching order"
            );
            vals
        };
        let mut outgoing = None;
        match step.ty {
            Ty::S => outgoing = Some(run.read(x, g, step.src, cnt)),
            Ty::R => {
                let v = incoming();
                run.write(x, g, step.dst, v);
            }
            Ty::Rcs => {
                let v = incoming();
                run.write(x, g, step.dst, v.clone());
                outgoing = Some(v);
            }
            Ty::Rrs => {
                let v = incoming();
                let mine = run.read(x, g, step.src, cnt);
                outgoing = Some(run.reduce(x, v, mine));
            }
            Ty::Rrc | Ty::Rrcs => {
                let v = incoming();
                let mine = run.read(x, g, step.src, cnt);
                let sum = run.reduce(x, v, mine);
                run.write(x, g, step.dst, sum.clone());
                if step.ty == Ty::Rrcs {
                    outgoing = Some(sum);
                }
            }
            Ty::Cpy => {
                let v = run.read(x, g, step.src, cnt);
                run.write(x, g, step.dst, v);
            }
            Ty::Re => {
                let d = run.read(x, g, step.dst, cnt);
                let s = run.read(x, g, step.src, cnt);
                let sum = run.reduce(x, d, s);
                run.write(x, g, step.dst, sum);
            }
            Ty::Nop => {}
        }
        if let Some(v) = outgoing {
            fifos
                .entry((tb.chan, g, tb.send as usize))
                .or_default()
                .push_back((x, v));
        }
    }
    Outcome {
        outputs: run.mem.into_iter().map(|[_, o, _]| o).collect(),
        errors: run.errors,
        unused_touched: run.unused_touched,
    }
}

/// What output chunk `c` of gpu `g` must hold (None: unspecified).
pub fn expected(algo: &Algo, g: usize, c: usize) -> Option<Vec<u32>> {
    let n = algo.ngpus;
    let block = algo.nchunksperloop / n;
    let all = |chunk: usize| (0..n).map(|r| contribution(r, chunk)).collect::<Vec<_>>();
    Some(match algo.coll {
        Coll::AllReduce => all(c),
        Coll::Broadcast => vec![contribution(algo.root, c)],
        Coll::Reduce if g == algo.root => all(c),
        Coll::Reduce => return None,
        Coll::AllGather => vec![contribution(c / block, c % block)],
        Coll::Gather if g == algo.root => vec![contribution(c / block, c % block)],
        Coll::Gather => return None,
        Coll::ReduceScatter => all(g * block + c),
        Coll::AllToAll => vec![contribution(c / block, g * block + c % block)],
        Coll::Scatter => vec![contribution(algo.root, g * block + c)],
    })
}

fn check_outputs(algo: &Algo, outputs: &[Vec<Val>]) -> Vec<SimError> {
    let mut errors = Vec::new();
    for (g, out) in outputs.iter().enumerate() {
        for (c, got) in out.iter().enumerate() {
            let Some(want) = expected(algo, g, c) else {
                continue;
            };
            if got.as_ref() != Some(&want) && errors.len() < 8 {
                errors.push(error(
                    ErrorKind::WrongResult,
                    format!(
                        "gpu {g} output chunk {c} holds {}, {:?} needs {}",
                        describe(got),
                        algo.coll,
                        describe(&Some(want))
                    ),
                ));
            }
        }
    }
    errors
}
