//! A rank's compiled program as the program kernel reads it (`program.cu`): per stream a
//! list of 64-bit words, uploaded once at compile, and the descriptor of one launch.
//!
//! ## Tasks
//!
//! A task is a header word, then its operands:
//!
//! | word | Copy / Reduce | Post | Wait |
//! |---|---|---|---|
//! | 0 | header | header | header |
//! | 1 | bytes / elements | signal word | signal word |
//! | 2.. | sources, then destinations | | |
//!
//! The header packs the kind (bits 0-7), the reduce pair (8-15, [`pair_index`]), the
//! sources (16-31), the destinations (32-39), whether the K blocks of the stream meet
//! before the task (bit 40: [`needs_sync`]) and the task's index in its stream (42-63,
//! for the watchdog). An operand is a device address, or an offset into a user buffer
//! ([`OWN_BIT`], [`OUTPUT_BIT`] for the Output, the offset in the low 48 bits): the rank's
//! own when bits 48-61 are zero, else the buffer of the rank they hold minus one (a peer on
//! the same GPU, zero-copy), which the kernel finds in the launch's table of user buffers.
//! A zero header ends the list.
//!
//! ## Why the program runs in a kernel
//!
//! The first version of this backend queued every task as stream work, a Wait as
//! `cuStreamWaitValue32`. A GPU runs the streams of a context on a few hardware queues
//! (`CUDA_DEVICE_MAX_CONNECTIONS`), so a stream blocked in a wait blocked the streams that
//! shared its queue, among them the ones that would have posted: several communicators
//! on one GPU hung. Here a rank's streams are thread blocks of one launch per GPU and
//! call, waits spin in the blocks, and the launch is cooperative, so all its blocks are
//! resident at once and every wait's poster runs (MSCCL's interpreter and NCCL's kernels
//! work the same way).

use super::compile::{Addr, Op};
use super::kernels::{pair_index, MAX_OPERANDS};
use super::CudaError;
use crate::ir::Buf;

const KIND_COPY: u64 = 1;
const KIND_REDUCE: u64 = 2;
const KIND_POST: u64 = 3;
const KIND_WAIT: u64 = 4;
const SYNC_BIT: u64 = 1 << 40;
const TASK_SHIFT: u32 = 42;
/// Tasks one stream may have (the header's task field).
pub(crate) const MAX_TASKS: usize = 1 << (64 - TASK_SHIFT);

/// An operand in the rank's own user buffer.
pub(crate) const OWN_BIT: u64 = 1 << 63;
/// With [`OWN_BIT`]: the Output (else the Input).
pub(crate) const OUTPUT_BIT: u64 = 1 << 62;
/// Offsets into a user buffer below this fit the operand word.
const OFFSET_LIMIT: u64 = 1 << PEER_SHIFT;
/// Where a user operand holds its peer's rank plus one (zero: the rank's own buffer).
const PEER_SHIFT: u32 = 48;
/// Peer ranks plus one below this fit the operand word.
const PEER_LIMIT: u64 = 1 << (62 - PEER_SHIFT);

// The kernel's fault word (`program.cu`) holds the stream from bit 24 and the task + 1
// below it: every task index of a stream must fit there.
const _: () = assert!(MAX_TASKS < 1 << 24);

/// Words of one entry (one stream of one rank) of a launch's descriptor.
pub(crate) const ENTRY_WORDS: usize = 10;

/// The program kernel's one argument, laid out as `program.cu`'s `Params`.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub(crate) struct Params {
    pub desc: u64,
    pub epoch: u64,
    pub abort: u64,
    /// The launch's table of user buffers: (Input, Output) per rank of the communicator.
    pub users: u64,
    pub k: u32,
}

/// One stream's words and the bytes of its largest data task.
#[derive(Debug, Default)]
pub(crate) struct Encoded {
    pub words: Vec<u64>,
    pub largest: usize,
}

/// Encode one stream's ops.
pub(crate) fn encode(ops: &[Op]) -> Result<Encoded, CudaError> {
    if ops.len() >= MAX_TASKS {
        return Err(CudaError::TooManyTasks {
            tasks: ops.len(),
            max: MAX_TASKS - 1,
        });
    }
    let mut out = Encoded::default();
    let mut since_sync = Touched::default();
    for (t, op) in ops.iter().enumerate() {
        let task = (t as u64) << TASK_SHIFT;
        match op {
            Op::Post { addr, .. } => {
                out.words.extend([KIND_POST | task, *addr]);
                since_sync = Touched::default();
            }
            Op::Wait { addr, .. } => {
                out.words.extend([KIND_WAIT | task, *addr]);
                since_sync = Touched::default();
            }
            Op::Copy { .. } | Op::Reduce { .. } => {
                let data = Data::of(op);
                let sync = needs_sync(&since_sync, &data);
                if sync {
                    since_sync = Touched::default();
                }
                since_sync.add(&data);
                out.largest = out.largest.max(data.bytes);
                encode_data(&mut out.words, op, task | if sync { SYNC_BIT } else { 0 })?;
            }
        }
    }
    out.words.push(0);
    Ok(out)
}

fn encode_data(words: &mut Vec<u64>, op: &Op, head: u64) -> Result<(), CudaError> {
    let (kind, pair, srcs, dsts, count) = match op {
        Op::Copy { src, dsts, len } => (KIND_COPY, 0, std::slice::from_ref(src), dsts, *len),
        Op::Reduce {
            srcs,
            dsts,
            count,
            dtype,
            op,
        } => (
            KIND_REDUCE,
            pair_index(*dtype, *op),
            &srcs[..],
            dsts,
            *count,
        ),
        Op::Post { .. } | Op::Wait { .. } => unreachable!("not a data task"),
    };
    let operands = srcs.len() + dsts.len();
    if operands > MAX_OPERANDS || dsts.len() > 0xff {
        return Err(CudaError::TooManyOperands {
            operands,
            max: MAX_OPERANDS,
        });
    }
    words.push(
        head | kind | (pair as u64) << 8 | (srcs.len() as u64) << 16 | (dsts.len() as u64) << 32,
    );
    words.push(count as u64);
    for a in srcs.iter().chain(dsts) {
        words.push(operand(*a)?);
    }
    Ok(())
}

fn operand(a: Addr) -> Result<u64, CudaError> {
    Ok(match a {
        // A device address with the tag bits set would be read as a user-buffer offset.
        Addr::Fixed(p) if p & (OWN_BIT | OUTPUT_BIT) != 0 => {
            return Err(CudaError::AddressTooHigh { addr: p })
        }
        Addr::Fixed(p) => p,
        Addr::Own { buf, offset } => user_operand(0, buf, offset)?,
        Addr::Peer { rank, buf, offset } => {
            let tag = (rank as u64)
                .checked_add(1)
                .filter(|&t| t < PEER_LIMIT)
                .ok_or(CudaError::PeerRankTooHigh {
                    rank,
                    max: PEER_LIMIT as usize - 2,
                })?;
            user_operand(tag, buf, offset)?
        }
    })
}

/// A user-buffer operand: `tag` is zero for the rank's own buffer, a peer's rank plus one
/// otherwise.
fn user_operand(tag: u64, buf: Buf, offset: usize) -> Result<u64, CudaError> {
    let offset = offset as u64;
    if offset >= OFFSET_LIMIT {
        return Err(CudaError::OffsetTooLarge {
            offset: offset as usize,
        });
    }
    let output = if buf == Buf::Output { OUTPUT_BIT } else { 0 };
    Ok(OWN_BIT | output | tag << PEER_SHIFT | offset)
}

/// The byte ranges a data task reads and writes: device addresses, and offsets into the
/// user buffers (a rank's Input and Output taken as one space, as they may be one buffer;
/// distinct ranks' buffers are distinct, which the launch checks).
#[derive(Debug)]
struct Data {
    reads: Vec<Range>,
    writes: Vec<Range>,
    bytes: usize,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Range {
    /// 0: device memory; 1: the rank's own user buffers; 2 + r: rank r's.
    space: usize,
    start: u64,
    end: u64,
}

impl Range {
    fn of(a: Addr, len: usize) -> Range {
        let (space, start) = match a {
            Addr::Fixed(p) => (0, p),
            Addr::Own { offset, .. } => (1, offset as u64),
            Addr::Peer { rank, offset, .. } => (rank.saturating_add(2), offset as u64),
        };
        Range {
            space,
            start,
            end: start.saturating_add(len as u64),
        }
    }

    fn overlaps(&self, other: &Range) -> bool {
        self.space == other.space && self.start < other.end && other.start < self.end
    }
}

impl Data {
    fn of(op: &Op) -> Data {
        let (srcs, dsts, bytes) = match op {
            Op::Copy { src, dsts, len } => (std::slice::from_ref(src), &dsts[..], *len),
            Op::Reduce {
                srcs,
                dsts,
                count,
                dtype,
                ..
            } => (&srcs[..], &dsts[..], count.saturating_mul(dtype.size())),
            Op::Post { .. } | Op::Wait { .. } => (&[][..], &[][..], 0),
        };
        Data {
            reads: srcs.iter().map(|a| Range::of(*a, bytes)).collect(),
            writes: dsts.iter().map(|a| Range::of(*a, bytes)).collect(),
            bytes,
        }
    }
}

/// What the data tasks since the stream's blocks last met touched.
#[derive(Debug, Default)]
struct Touched {
    reads: Vec<Range>,
    writes: Vec<Range>,
}

impl Touched {
    fn add(&mut self, d: &Data) {
        self.reads.extend(&d.reads);
        self.writes.extend(&d.writes);
    }
}

/// Whether the K blocks of a stream must meet before `next`: each block does its own
/// slice of every task, so a task that reads or writes bytes an earlier task (since the
/// last meeting) wrote, or writes bytes it read, may need another block's slice done.
fn needs_sync(before: &Touched, next: &Data) -> bool {
    let hits = |a: &[Range], b: &[Range]| a.iter().any(|x| b.iter().any(|y| x.overlaps(y)));
    hits(&before.writes, &next.reads)
        || hits(&before.writes, &next.writes)
        || hits(&before.reads, &next.writes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{DataType, ReduceOp};
    use crate::ir::NotifyId;

    fn copy(src: u64, dst: u64, len: usize) -> Op {
        Op::Copy {
            src: Addr::Fixed(src),
            dsts: vec![Addr::Fixed(dst)],
            len,
        }
    }

    fn heads(e: &Encoded) -> Vec<u64> {
        let mut out = Vec::new();
        let mut i = 0;
        while e.words[i] != 0 {
            let h = e.words[i];
            out.push(h);
            i += match h & 0xff {
                KIND_POST | KIND_WAIT => 2,
                _ => 2 + ((h >> 16) & 0xffff) as usize + ((h >> 32) & 0xff) as usize,
            };
        }
        out
    }

    #[test]
    fn independent_copies_run_without_a_meeting_and_dependent_ones_meet() {
        let ops = [
            copy(0x1000, 0x2000, 256),
            copy(0x3000, 0x4000, 256),
            copy(0x2000, 0x5000, 256),
            copy(0x6000, 0x3000, 16),
        ];
        let e = encode(&ops).unwrap();
        let sync: Vec<bool> = heads(&e).iter().map(|h| h & SYNC_BIT != 0).collect();
        // The third reads what the first wrote. The fourth writes what the second read,
        // but the blocks met before the third, so only the third's ranges count.
        assert_eq!(sync, [false, false, true, false]);
        assert_eq!(e.largest, 256);
    }

    #[test]
    fn a_device_address_with_a_tag_bit_is_refused() {
        let err = encode(&[copy(0x1000, 1 << 62, 8)]).unwrap_err();
        assert!(
            matches!(err, CudaError::AddressTooHigh { addr } if addr == 1 << 62),
            "{err}"
        );
    }

    #[test]
    fn a_write_over_an_earlier_read_meets() {
        let ops = [copy(0x1000, 0x2000, 256), copy(0x3000, 0x1080, 8)];
        let e = encode(&ops).unwrap();
        assert!(heads(&e)[1] & SYNC_BIT != 0);
    }

    #[test]
    fn posts_and_waits_are_meetings_and_carry_the_task_index() {
        let notify = NotifyId { rank: 0, index: 3 };
        let ops = [
            copy(0x1000, 0x2000, 256),
            Op::Post {
                addr: 0x9000,
                notify,
            },
            copy(0x2000, 0x3000, 256),
            Op::Wait {
                addr: 0x9004,
                notify,
            },
        ];
        let e = encode(&ops).unwrap();
        let h = heads(&e);
        assert_eq!(h[2] & SYNC_BIT, 0, "the post already met");
        assert_eq!(h[3] >> TASK_SHIFT, 3);
        assert_eq!(h[1] & 0xff, KIND_POST);
    }

    #[test]
    fn own_operands_are_tagged_and_input_and_output_count_as_one_space() {
        let ops = [
            Op::Reduce {
                srcs: vec![
                    Addr::Own {
                        buf: Buf::Input,
                        offset: 64,
                    },
                    Addr::Fixed(0x7000),
                ],
                dsts: vec![Addr::Own {
                    buf: Buf::Output,
                    offset: 0,
                }],
                count: 16,
                dtype: DataType::F32,
                op: ReduceOp::Max,
            },
            Op::Copy {
                src: Addr::Fixed(0x8000),
                dsts: vec![Addr::Own {
                    buf: Buf::Input,
                    offset: 32,
                }],
                len: 8,
            },
        ];
        let e = encode(&ops).unwrap();
        assert_eq!(e.words[2], OWN_BIT | 64);
        assert_eq!(e.words[4], OWN_BIT | OUTPUT_BIT);
        let h = heads(&e);
        assert_eq!(
            (h[0] >> 8) & 0xff,
            pair_index(DataType::F32, ReduceOp::Max) as u64
        );
        assert!(
            h[1] & SYNC_BIT != 0,
            "Output [0, 64) and Input [32, 40) may overlap"
        );
        assert_eq!(e.largest, 64);
    }

    #[test]
    fn a_peer_operand_carries_its_rank_plus_one_and_is_a_space_of_its_own() {
        let peer = |rank, buf, offset| Addr::Peer { rank, buf, offset };
        let own_out = Addr::Own {
            buf: Buf::Output,
            offset: 0,
        };
        let ops = [
            Op::Copy {
                src: peer(3, Buf::Input, 64),
                dsts: vec![peer(0, Buf::Output, 8)],
                len: 8,
            },
            // The same offsets in the rank's own buffers and in another peer's: no
            // meeting (distinct spaces), but writing what rank 3's input gave meets.
            Op::Copy {
                src: peer(5, Buf::Output, 8),
                dsts: vec![own_out],
                len: 8,
            },
            Op::Copy {
                src: Addr::Fixed(0x1000),
                dsts: vec![peer(0, Buf::Input, 8)],
                len: 8,
            },
        ];
        let e = encode(&ops).unwrap();
        assert_eq!(e.words[2], OWN_BIT | 4 << PEER_SHIFT | 64);
        assert_eq!(e.words[3], OWN_BIT | OUTPUT_BIT | 1 << PEER_SHIFT | 8);
        let sync: Vec<bool> = heads(&e).iter().map(|h| h & SYNC_BIT != 0).collect();
        assert_eq!(
            sync,
            [false, false, true],
            "rank 0's Input and Output are one space"
        );
        let too_high = Op::Copy {
            src: peer(PEER_LIMIT as usize - 1, Buf::Input, 0),
            dsts: vec![own_out],
            len: 8,
        };
        assert!(matches!(
            encode(&[too_high]),
            Err(CudaError::PeerRankTooHigh { .. })
        ));
        let far = Op::Copy {
            src: peer(1, Buf::Input, OFFSET_LIMIT as usize),
            dsts: vec![own_out],
            len: 8,
        };
        assert!(matches!(
            encode(&[far]),
            Err(CudaError::OffsetTooLarge { .. })
        ));
    }

    #[test]
    fn too_many_operands_is_an_error() {
        let op = Op::Copy {
            src: Addr::Fixed(0x1000),
            dsts: (0..MAX_OPERANDS as u64)
                .map(|i| Addr::Fixed(0x10000 * i))
                .collect(),
            len: 4,
        };
        assert!(matches!(
            encode(&[op]),
            Err(CudaError::TooManyOperands { .. })
        ));
    }

    #[test]
    fn params_match_the_c_layout() {
        assert_eq!(std::mem::size_of::<Params>(), 40);
    }
}
