//! How many message slots per connection a file needs to run without deadlock.
//!
//! MSCCL's FIFOs are finite (NCCL's 8 steps per connection); a schedule whose sender runs
//! ahead of its receiver by more messages than the FIFO holds waits for room that only
//! its own later steps would make. The translation ([`super::executor`]) gives each
//! connection `D` slots: the sender of message `k` waits until message `k - D` was
//! consumed. [`fifo_depth`] finds the least `D` with which every step of the file can
//! run, by executing the schedule symbolically (steps in threadblock order, a step
//! waiting for its dependency, its message and its slot) until it completes or sticks.

use super::model::Algorithm;
use super::wiring::{tb_index, Wiring};

/// The most slots per connection [`fifo_depth`] tries.
pub const MAX_DEPTH: usize = 16;

/// The least slot count (1 to [`MAX_DEPTH`]) with which the file's schedule completes,
/// or `None` when it sticks even with [`MAX_DEPTH`].
pub fn fifo_depth(algo: &Algorithm, wiring: &Wiring) -> Option<usize> {
    (1..=MAX_DEPTH).find(|&d| completes(algo, wiring, d))
}

/// Whether every step runs with `slots` slots per connection.
pub fn completes(algo: &Algorithm, wiring: &Wiring, slots: usize) -> bool {
    // Per gpu and threadblock: steps done so far (a program counter).
    let mut done: Vec<Vec<usize>> = algo.gpus.iter().map(|g| vec![0; g.tbs.len()]).collect();
    // Per connection: messages sent, messages consumed.
    let mut sent = vec![0usize; wiring.connections.len()];
    let mut consumed = vec![0usize; wiring.connections.len()];
    let total: usize = algo
        .gpus
        .iter()
        .flat_map(|g| g.tbs.iter().map(|t| t.steps.len()))
        .sum();
    let mut finished = 0;
    loop {
        let mut progressed = false;
        for (g, gpu) in algo.gpus.iter().enumerate() {
            for t in 0..gpu.tbs.len() {
                while let Some(step) = gpu.tbs[t].steps.get(done[g][t]) {
                    let s = done[g][t];
                    let dep_ready = step.dep.is_none_or(|(dt, ds)| {
                        tb_index(algo, g, dt).is_none_or(|dt| done[g][dt] > ds)
                    });
                    let recv = wiring.recvs.get(&(g, t, s));
                    let send = wiring.sends.get(&(g, t, s));
                    let data_ready = recv.is_none_or(|e| sent[e.conn] > e.k);
                    let room = send.is_none_or(|e| e.k < slots || consumed[e.conn] > e.k - slots);
                    if !(dep_ready && data_ready && room) {
                        break;
                    }
                    if let Some(e) = recv {
                        consumed[e.conn] += 1;
                    }
                    if let Some(e) = send {
                        sent[e.conn] += 1;
                    }
                    done[g][t] += 1;
                    finished += 1;
                    progressed = true;
                }
            }
        }
        if finished == total {
            return true;
        }
        if !progressed {
            return false;
        }
    }
}
