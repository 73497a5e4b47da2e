//! Double (bidirectional) ring: the data split in two halves, one ring clockwise on the
//! main stream and link channel 0, the other counter-clockwise on slave stream 1 and link
//! channel 1, so both directions of every ring link carry data at once (HCCL's double
//! ring, NCCL's two rings per channel pair).
//!
//! [`double_ring`] gives each [`Direction`] its order, stream, channel and half of every chunk;
//! executors run their ring template once per direction between `ctx.fork(1..=1)` and
//! `ctx.join(1..=1)`.

use oxccl_framework::platform::Rank;

oxccl_framework::register_template! {
    name: "double_ring",
    description: "two rings in opposite directions on half of every chunk each, on two streams and channels",
}

/// One direction of a double ring.
#[derive(Clone, Debug)]
pub struct Direction {
    pub order: Vec<Rank>,
    pub stream: usize,
    pub channel: usize,
    /// This direction's half of every chunk, `(byte offset, byte length)`.
    pub chunks: Vec<(usize, usize)>,
}

/// The two directions of a double ring over `order`, splitting every chunk of `chunks`
/// (whole elements of `elem_size` bytes) into a first half (clockwise) and the rest
/// (counter-clockwise).
pub fn double_ring(order: &[Rank], chunks: &[(usize, usize)], elem_size: usize) -> [Direction; 2] {
    let first = |&(off, len): &(usize, usize)| (off, (len / elem_size).div_ceil(2) * elem_size);
    let second = |c: &(usize, usize)| {
        let (off, half) = first(c);
        (off + half, c.1 - half)
    };
    [
        Direction {
            order: order.to_vec(),
            stream: 0,
            channel: 0,
            chunks: chunks.iter().map(first).collect(),
        },
        Direction {
            order: order.iter().rev().copied().collect(),
            stream: 1,
            channel: 1,
            chunks: chunks.iter().map(second).collect(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_cover_every_chunk_and_orders_are_reversed() {
        let [a, b] = double_ring(&[0, 2, 1], &[(0, 12), (12, 4), (16, 0)], 4);
        assert_eq!(a.chunks, vec![(0, 8), (12, 4), (16, 0)]);
        assert_eq!(b.chunks, vec![(8, 4), (16, 0), (16, 0)]);
        assert_eq!(b.order, vec![1, 2, 0]);
        assert_eq!((a.stream, a.channel, b.stream, b.channel), (0, 0, 1, 1));
    }
}
