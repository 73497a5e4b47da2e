//! The documented upper bounds on what a caller, a file or the environment may ask for.
//!
//! Every size, count and rank number that reaches oxccl from outside is checked against
//! these bounds (and computed with checked arithmetic) before anything is allocated or
//! built, so no input can make a call run away with memory or time. Past a bound the
//! answer is a typed error that names the bound and the value asked for.
//!
//! Why these numbers:
//! - [`MAX_RANKS`] = 4096: one communicator's ranks, HCCL's and NCCL's cluster scale
//!   (`512x8`). Nothing in selection grows with it past a bound: select_alg replays every
//!   rank only while a candidate's programs stay within its simulation budget, and plans a
//!   few representative ranks beyond (see `select::model`). What still grows
//!   quadratically is the in-process platform's notify table (a table row per peer) and
//!   the analyzer's proof of every rank's program, which `oxccl check` runs on the chosen
//!   executor: at 4096 ranks that is gigabytes, so in-process communicators of that size
//!   are for checking and modelling more than for running.
//! - [`MAX_BUFFER_BYTES`] = 1 TiB: one rank's input or output buffer. Larger than the
//!   memory of any host or GPU a rank runs on today, small enough that every byte offset
//!   derived from it, times any rank count up to [`MAX_RANKS`], fits a `usize` with room
//!   to spare, and that programs built for it stay bounded (see [`MAX_TASKS`]).
//! - [`MAX_TASKS`] = 4 Mi: tasks in one rank's program. A staged 1 TiB AllReduce through
//!   32 MiB CCL buffers takes about 700 Ki tasks; beyond this bound a program would cost
//!   gigabytes to hold, so building it is refused (raise `OXCCL_BUFFSIZE`, or split the
//!   call).
//! - [`MAX_HOST_THREADS`] = 1024: worker threads of the host device.
//! - [`MAX_P2P_ITEMS`] = 1 Mi: sends plus receives of one AlltoAllV or send/recv call on
//!   one rank.
//! - [`MAX_SLAVE_STREAMS`] = 1024 and [`MAX_LOCAL_NOTIFIES`] = 64 Ki: what one executor's
//!   resource request may ask for on one rank (every rank's notify table grows with it),
//!   and [`MAX_BUFFER_BYTES`] of scratch.
//!
//! - [`MAX_LINK_CHANNELS`] = 64: notify channels per link (`OXCCL_LINK_CHANNELS`).
//! - [`MAX_ALGO_FILE_BYTES`] = 256 MiB: one MSCCL-IR algorithm file, and
//!   [`MAX_CHUNKS_PER_LOOP`] = 1 Mi: its `nchunksperloop` (a 16-rank file with 24
//!   threadblocks per gpu is about 1.4 MB).
//!
//! Input files are read through [`read_bounded`], each format with its own bound, so that
//! a path such as `/dev/zero` is refused rather than read without end.

/// Most ranks a communicator or topology may have.
pub const MAX_RANKS: usize = 4096;

/// Most bytes one rank's input or output buffer of one call may span.
pub const MAX_BUFFER_BYTES: usize = 1 << 40;

/// Most tasks one rank's program may hold.
pub const MAX_TASKS: usize = 4 << 20;

/// Most worker threads of the host device.
pub const MAX_HOST_THREADS: usize = 1024;

/// Most sends plus receives of one vector call on one rank.
pub const MAX_P2P_ITEMS: usize = 1 << 20;

/// Most slave streams one executor may request per rank.
pub const MAX_SLAVE_STREAMS: usize = 1024;

/// Most executor-private local notifies one executor may request per rank.
pub const MAX_LOCAL_NOTIFIES: usize = 64 << 10;

/// Most notify channels per link.
pub const MAX_LINK_CHANNELS: usize = 64;

/// Most bytes of one MSCCL-IR algorithm file.
pub const MAX_ALGO_FILE_BYTES: usize = 256 << 20;

/// Most chunks per loop an MSCCL-IR algorithm may cut its buffers into.
pub const MAX_CHUNKS_PER_LOOP: usize = 1 << 20;

/// The text of `path`, refused (`InvalidData`) past `max_bytes`.
pub fn read_bounded(path: &std::path::Path, max_bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    let limit = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    std::fs::File::open(path)?
        .take(limit)
        .read_to_string(&mut text)?;
    if text.len() > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max_bytes} bytes, the most this format needs"),
        ));
    }
    Ok(text)
}
