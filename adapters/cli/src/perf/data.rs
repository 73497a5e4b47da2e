//! Test data for `oxccl perf`: inputs whose results are exact in every data type.
//!
//! Rank `r` holds small positive integers with a period of 8 elements: `1 + (3r + i) % 8`,
//! or `1 + (r + i) % 2` for products. Every partial result is then exactly representable
//! (f16 and bf16 included) or wraps identically in every order (integers), so the
//! expected output does not depend on the algorithm's reduction order, and only eight
//! expected elements need computing.

use oxccl::framework::op::VLayout;
use oxccl::platform::reduce::reduce_scalar;
use oxccl::{bf16, f16, DataType, OpKind, OpParam, ReduceOp};

/// Elements per period of the pattern.
const PERIOD: usize = 8;

/// What every receive buffer is filled with before the first call (its guard bytes too):
/// what a non-root's Reduce or Gather buffer must still hold afterwards.
pub const FILL: u8 = 0xA5;

/// A buffer viewed as bytes: on the heap, starting on a page boundary, or from
/// `alloc_shared` where the job's peers map user buffers.
///
/// Heap buffers start on a page, not wherever the allocator's history put them: a row
/// of `oxccl perf` or a point of `oxccl tune` must not depend on what was allocated
/// before it (the relative placement of a copy's source and destination within a page
/// and a cache line is known to move `memcpy`: 4 KiB aliasing, split lines). With
/// buffers where the allocator left them, an 8-rank 64 KiB send/recv by `p2p` (each rank
/// copying a peer's input) measured 1.35x the time of `put-p2p` late in three `oxccl
/// tune --all` runs, and 1.00x to 1.04x in tunes of send/recv alone; a 512 KiB Reduce by
/// `mesh` 1.17x to 1.21x that of `relay-reduce-scatter-gather` (90.3 and 93.6 µs in the
/// last two runs). Page-aligned, four `tune --all` runs measured `p2p` at 1.00x to
/// 1.11x, and `mesh` the fastest, at 71.8 to 74.5 µs.
pub struct Aligned {
    words: Words,
    len: usize,
}

enum Words {
    /// The allocation, and the index of the first word of the buffer in it.
    Heap(Vec<u64>, usize),
    Shared(oxccl::SharedBuffer<u64>),
}

/// The boundary heap buffers start on.
const PAGE: usize = 4096;

impl Aligned {
    pub fn zeroed(len: usize) -> Self {
        let words = len.div_ceil(8);
        let heap = vec![0u64; words + PAGE / 8];
        let misaligned = heap.as_ptr() as usize % PAGE;
        let start = (PAGE - misaligned) % PAGE / 8;
        Aligned {
            words: Words::Heap(heap, start),
            len,
        }
    }

    /// `len` zeroed bytes for `comm`'s calls: from `alloc_shared` (a collective
    /// allocation) when its peers map user buffers (`OXCCL_SHARED_BUFFERS`), else heap.
    pub fn for_calls(comm: &oxccl::Communicator, len: usize) -> Result<Self, oxccl::Error> {
        if !comm.framework().config().shared_buffers {
            return Ok(Self::zeroed(len));
        }
        Ok(Aligned {
            words: Words::Shared(comm.alloc_shared(len.div_ceil(8))?),
            len,
        })
    }

    fn words(&self) -> &[u64] {
        match &self.words {
            Words::Heap(v, start) => &v[*start..],
            Words::Shared(b) => b,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(self.words())[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let words: &mut [u64] = match &mut self.words {
            Words::Heap(v, start) => &mut v[*start..],
            Words::Shared(b) => b,
        };
        &mut bytemuck::cast_slice_mut(words)[..self.len]
    }
}

fn small_int(rank: usize, i: usize, op: ReduceOp) -> u8 {
    match op {
        ReduceOp::Prod => 1 + ((rank + i) % 2) as u8,
        _ => 1 + ((3 * rank + i) % PERIOD) as u8,
    }
}

/// The bytes of the small integer `v` as one element of `dtype`.
fn element(dtype: DataType, v: u8) -> Vec<u8> {
    let f = f32::from(v);
    match dtype {
        DataType::I8 | DataType::U8 => vec![v],
        DataType::I16 | DataType::U16 => u16::from(v).to_le_bytes().to_vec(),
        DataType::I32 | DataType::U32 => u32::from(v).to_le_bytes().to_vec(),
        DataType::I64 | DataType::U64 => u64::from(v).to_le_bytes().to_vec(),
        DataType::F16 => f16::from_f32(f).to_le_bytes().to_vec(),
        DataType::Bf16 => bf16::from_f32(f).to_le_bytes().to_vec(),
        DataType::F32 => f.to_le_bytes().to_vec(),
        DataType::F64 => f64::from(v).to_le_bytes().to_vec(),
    }
}

/// One period of rank `rank`'s input.
fn period(op: &OpParam, rank: usize) -> Vec<u8> {
    (0..PERIOD)
        .flat_map(|i| element(op.dtype, small_int(rank, i, op.op)))
        .collect()
}

/// Fill `buf` with rank `rank`'s input pattern.
pub fn fill_input(op: &OpParam, rank: usize, buf: &mut [u8]) {
    let pattern = period(op, rank);
    for (chunk, p) in buf
        .chunks_mut(pattern.len())
        .zip(std::iter::repeat(&pattern))
    {
        chunk.copy_from_slice(&p[..chunk.len()]);
    }
}

/// What every rank's output must hold, as periods of the input pattern.
///
/// AllReduce and Reduce (root): the reduced period. AllGather and Gather (root): output
/// block `s` is rank `s`'s input, so its own period, from the block's start.
/// ReduceScatter: rank `r`'s output is element `r * count + i` of every input reduced, so
/// the reduced period rotated by `r * count`; Scatter the same of the root's input.
/// Broadcast: the root's period. AlltoAll: block `s` is block `r` of rank `s`'s input.
/// Send/recv (each rank from the previous one): the previous rank's period. The V forms
/// use uniform packed layouts and match their fixed forms. A non-root's buffer of Reduce
/// and Gather is left as it was ([`FILL`]; in place, the rank's input where the call
/// put it), as NCCL leaves `recvbuff` unused off the root. Comparing against a period
/// keeps the check linear and cheap at 64 MiB.
pub struct Expected {
    op: OpParam,
    ranks: usize,
    /// One period of each rank's input.
    inputs: Vec<Vec<u8>>,
    /// One period of the reduction over every rank's input.
    reduced: Vec<u8>,
}

impl Expected {
    /// The expectation for `op` over `ranks` ranks, or why it cannot be checked.
    pub fn new(op: &OpParam, ranks: usize) -> Result<Self, String> {
        if op.layout().is_some_and(|l| !is_uniform(l)) {
            return Err(format!(
                "oxccl perf checks {} only with uniform packed layouts",
                op.kind
            ));
        }
        let es = op.dtype.size();
        let inputs: Vec<Vec<u8>> = (0..ranks).map(|r| period(op, r)).collect();
        let mut reduced = inputs[0].clone();
        for input in &inputs[1..] {
            for i in 0..PERIOD {
                let r = i * es..(i + 1) * es;
                let v = reduce_scalar(op.dtype, op.op, &reduced[r.clone()], &input[r.clone()]);
                reduced[r].copy_from_slice(&v);
            }
        }
        Ok(Expected {
            op: op.clone(),
            ranks,
            inputs,
            reduced,
        })
    }

    /// Wrong elements of `rank`'s result: `buf` is its output buffer, or its one buffer
    /// of an in-place call (where ReduceScatter's result is block `rank`).
    pub fn count_wrong(&self, rank: usize, in_place: bool, buf: &[u8]) -> usize {
        let es = self.op.dtype.size();
        let count = block_count(&self.op);
        let block = count * es;
        let n = self.ranks;
        let root = self.op.root.unwrap_or(0);
        // Block `s` of `buf` against `period` rotated by `shift` elements.
        let block_wrong = |s: usize, period: &[u8], shift: usize| {
            let mut rotated = period.to_vec();
            rotated.rotate_left((shift % PERIOD) * es);
            count_wrong(&buf[s * block..(s + 1) * block], &rotated, es)
        };
        let own = if in_place { rank } else { 0 };
        match self.op.kind {
            OpKind::AllGather | OpKind::AllGatherV => {
                (0..n).map(|s| block_wrong(s, &self.inputs[s], 0)).sum()
            }
            OpKind::Gather if rank == root => {
                (0..n).map(|s| block_wrong(s, &self.inputs[s], 0)).sum()
            }
            OpKind::Gather | OpKind::Reduce if rank != root => self.changed(rank, in_place, buf),
            OpKind::ReduceScatter | OpKind::ReduceScatterV => {
                block_wrong(own, &self.reduced, rank * count)
            }
            OpKind::Scatter => block_wrong(own, &self.inputs[root], rank * count),
            OpKind::Broadcast => block_wrong(0, &self.inputs[root], 0),
            OpKind::AlltoAll | OpKind::AlltoAllV => (0..n)
                .map(|s| block_wrong(s, &self.inputs[s], rank * count))
                .sum(),
            OpKind::SendRecv => block_wrong(0, &self.inputs[(rank + n - 1) % n], 0),
            OpKind::Barrier => 0,
            _ => block_wrong(0, &self.reduced, 0),
        }
    }
}

impl Expected {
    /// Elements of a non-root's Reduce or Gather buffer `buf` that the call changed: it
    /// must hold [`FILL`], and in place its input where the call put it.
    fn changed(&self, rank: usize, in_place: bool, buf: &[u8]) -> usize {
        let es = self.op.dtype.size();
        let own = match in_place {
            true => {
                let (at, _) = self.op.in_place_offsets(rank);
                at..at + block_count(&self.op) * es
            }
            false => 0..0,
        };
        let fill = vec![FILL; PERIOD * es];
        count_wrong(&buf[..own.start], &fill, es)
            + count_wrong(&buf[own.clone()], &self.inputs[rank], es)
            + count_wrong(&buf[own.end..], &fill, es)
    }
}

/// Elements of one block: `count`, or the first block of a vector operator's layout.
fn block_count(op: &OpParam) -> usize {
    match op.layout() {
        Some(VLayout::Blocks { counts, .. }) => counts.first().copied().unwrap_or(0),
        Some(VLayout::P2p { sends, .. }) => sends.first().map_or(0, |s| s.count),
        None => op.count,
    }
}

/// Whether every block of a layout has the same count and blocks are packed in rank order
/// (every peer's receive at `peer * count`), as `oxccl perf` builds them.
fn is_uniform(layout: &VLayout) -> bool {
    let packed = |counts: &[usize], displs: &[usize]| {
        let c = counts.first().copied().unwrap_or(0);
        counts.iter().all(|&x| x == c) && displs.iter().enumerate().all(|(r, &d)| d == r * c)
    };
    match layout {
        VLayout::Blocks { counts, displs } => packed(counts, displs),
        VLayout::P2p { recvs, .. } if recvs.len() == 1 => recvs[0].offset == 0,
        VLayout::P2p { sends, recvs } => {
            let counts: Vec<usize> = recvs.iter().map(|i| i.count).collect();
            let displs: Vec<usize> = recvs.iter().map(|i| i.offset).collect();
            let send_displs: Vec<usize> = sends.iter().map(|i| i.offset).collect();
            packed(&counts, &displs) && packed(&counts, &send_displs)
        }
    }
}

/// Elements of `out` that differ from the repeated `expected` period.
fn count_wrong(out: &[u8], expected: &[u8], elem_size: usize) -> usize {
    out.chunks(expected.len())
        .map(|chunk| {
            chunk
                .chunks(elem_size)
                .zip(expected.chunks(elem_size))
                .filter(|(a, b)| a != b)
                .count()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_buffers_start_on_a_page_and_hold_their_length() {
        for len in [0, 1, 7, 4096, 65536 + 3] {
            let mut a = Aligned::zeroed(len);
            assert_eq!(a.bytes().as_ptr() as usize % PAGE, 0, "{len}");
            assert_eq!(a.bytes().len(), len);
            assert!(a.bytes().iter().all(|&b| b == 0));
            a.bytes_mut().fill(7);
            assert!(a.bytes().iter().all(|&b| b == 7));
        }
    }

    /// The inputs of every rank, in full.
    fn inputs(op: &OpParam, ranks: usize, len: usize) -> Vec<Aligned> {
        (0..ranks)
            .map(|r| {
                let mut a = Aligned::zeroed(len);
                fill_input(op, r, a.bytes_mut());
                a
            })
            .collect()
    }

    #[test]
    fn all_gather_expects_each_block_from_its_rank() {
        let op = OpParam::all_gather(5, DataType::I32);
        let e = Expected::new(&op, 3).unwrap();
        let ins = inputs(&op, 3, 20);
        let gathered: Vec<u8> = ins.iter().flat_map(|a| a.bytes().to_vec()).collect();
        assert_eq!(e.count_wrong(1, false, &gathered), 0);
        let mut swapped = gathered.clone();
        swapped[..20].copy_from_slice(ins[1].bytes());
        assert!(e.count_wrong(1, false, &swapped) > 0);
    }

    #[test]
    fn reduce_scatter_expects_the_own_block_reduced() {
        let op = OpParam::reduce_scatter(5, DataType::F32, ReduceOp::Sum);
        let ins = inputs(&op, 3, 60);
        let e = Expected::new(&op, 3).unwrap();
        for rank in 0..3 {
            let block = |r: usize| -> Vec<f32> {
                bytemuck::pod_collect_to_vec(&ins[r].bytes()[rank * 20..(rank + 1) * 20])
            };
            let sum: Vec<f32> = (0..5).map(|i| (0..3).map(|r| block(r)[i]).sum()).collect();
            let out: Vec<u8> = bytemuck::cast_slice(&sum).to_vec();
            assert_eq!(e.count_wrong(rank, false, &out), 0, "rank {rank}");
            let mut in_place = vec![0u8; 60];
            in_place[rank * 20..(rank + 1) * 20].copy_from_slice(&out);
            assert_eq!(e.count_wrong(rank, true, &in_place), 0, "rank {rank}");
            // Another rank's block is wrong here.
            assert!(
                e.count_wrong((rank + 1) % 3, false, &out) > 0,
                "rank {rank}"
            );
        }
    }
}
