//! Which step talks to which: MSCCL's per-connection FIFO matching, and the dependency
//! edges between threadblocks, derived once from a file.
//!
//! A connection is one (channel, sender, receiver) triple. MSCCL gives each its own FIFO:
//! the k-th sending step of the sender's threadblock that sends to the receiver on that
//! channel delivers to the k-th receiving step of the receiver's threadblock that receives
//! from the sender on it.

use super::model::Algorithm;
use std::collections::BTreeMap;

/// One message of a connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Index of the sending step in its threadblock.
    pub send_step: usize,
    /// Index of the receiving step in its threadblock.
    pub recv_step: usize,
    /// Chunks it carries.
    pub cnt: usize,
}

/// One (channel, sender, receiver) FIFO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    pub chan: usize,
    pub from: usize,
    pub to: usize,
    /// Index (in file order) of the sender's threadblock, and of the receiver's.
    pub send_tb: usize,
    pub recv_tb: usize,
    pub messages: Vec<Message>,
    /// The largest message, in chunks.
    pub max_cnt: usize,
}

/// A step's role in a connection: which connection, and which message of it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct End {
    pub conn: usize,
    pub k: usize,
}

/// Everything derived from the file's sends, receives and dependencies.
#[derive(Clone, Debug, Default)]
pub struct Wiring {
    pub connections: Vec<Connection>,
    /// Per (gpu, tb index, step): the message it sends and the one it receives.
    pub sends: BTreeMap<(usize, usize, usize), End>,
    pub recvs: BTreeMap<(usize, usize, usize), End>,
    /// Per (gpu, tb index, step) that others wait for: the dependent (tb index, step)s,
    /// in order. Each edge gets one private notify ([`Wiring::edges`]).
    pub dependents: BTreeMap<(usize, usize, usize), Vec<(usize, usize)>>,
}

impl Wiring {
    /// The dependency edges of `gpu` as (producer, consumer), each a (tb index, step),
    /// numbered in this order.
    pub fn edges(&self, gpu: usize) -> Vec<((usize, usize), (usize, usize))> {
        self.dependents
            .range((gpu, 0, 0)..(gpu + 1, 0, 0))
            .flat_map(|(&(_, t, s), consumers)| consumers.iter().map(move |&c| ((t, s), c)))
            .collect()
    }

    /// Connections into `gpu`, in connection order.
    pub fn incoming(&self, gpu: usize) -> impl Iterator<Item = (usize, &Connection)> {
        self.connections
            .iter()
            .enumerate()
            .filter(move |(_, c)| c.to == gpu)
    }
}

/// Index of threadblock `id` of `gpu` in file order.
pub fn tb_index(algo: &Algorithm, gpu: usize, id: usize) -> Option<usize> {
    algo.gpus.get(gpu)?.tbs.iter().position(|t| t.id == id)
}

/// Sending (or receiving) steps of each (channel, gpu, peer) in step order, with their
/// threadblock: the two sides the matching pairs up. Keys are (chan, gpu, peer).
pub type Sides = BTreeMap<(usize, usize, usize), (usize, Vec<usize>)>;

/// The sending and receiving steps of every threadblock, by connection end. A
/// threadblock without a peer for the steps it has is left out (validation reports it).
pub fn sides(algo: &Algorithm) -> (Sides, Sides) {
    let (mut sends, mut recvs) = (Sides::new(), Sides::new());
    for (g, gpu) in algo.gpus.iter().enumerate() {
        for (t, tb) in gpu.tbs.iter().enumerate() {
            let steps = |pred: fn(super::model::StepKind) -> bool| -> Vec<usize> {
                (0..tb.steps.len())
                    .filter(|&s| pred(tb.steps[s].kind))
                    .collect()
            };
            if let Some(peer) = tb.send {
                sends
                    .entry((tb.chan, g, peer))
                    .or_insert((t, steps(|k| k.sends())));
            }
            if let Some(peer) = tb.recv {
                recvs
                    .entry((tb.chan, g, peer))
                    .or_insert((t, steps(|k| k.receives())));
            }
        }
    }
    (sends, recvs)
}

/// The wiring of a file that passed validation (connections balance, dependencies name
/// existing steps).
pub fn wire(algo: &Algorithm) -> Wiring {
    let (sends, recvs) = sides(algo);
    let mut w = Wiring::default();
    for (&(chan, from, to), (send_tb, send_steps)) in &sends {
        let Some((recv_tb, recv_steps)) = recvs.get(&(chan, to, from)) else {
            continue;
        };
        let gpu = &algo.gpus[from];
        let messages: Vec<Message> = send_steps
            .iter()
            .zip(recv_steps)
            .map(|(&send_step, &recv_step)| Message {
                send_step,
                recv_step,
                cnt: gpu.tbs[*send_tb].steps[send_step].cnt,
            })
            .collect();
        if messages.is_empty() {
            continue;
        }
        let conn = w.connections.len();
        for (k, m) in messages.iter().enumerate() {
            w.sends
                .insert((from, *send_tb, m.send_step), End { conn, k });
            w.recvs.insert((to, *recv_tb, m.recv_step), End { conn, k });
        }
        w.connections.push(Connection {
            chan,
            from,
            to,
            send_tb: *send_tb,
            recv_tb: *recv_tb,
            max_cnt: messages.iter().map(|m| m.cnt).max().unwrap_or(0),
            messages,
        });
    }
    for (g, gpu) in algo.gpus.iter().enumerate() {
        for (t, tb) in gpu.tbs.iter().enumerate() {
            for (s, step) in tb.steps.iter().enumerate() {
                let Some((dep_tb, dep_step)) = step.dep else {
                    continue;
                };
                match tb_index(algo, g, dep_tb) {
                    // Stream order already holds a dependency on an earlier step of the
                    // same threadblock.
                    Some(dt) if dt == t => {}
                    Some(dt) => w
                        .dependents
                        .entry((g, dt, dep_step))
                        .or_default()
                        .push((t, s)),
                    None => {}
                }
            }
        }
    }
    w
}
