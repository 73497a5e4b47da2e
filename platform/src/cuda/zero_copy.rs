//! What a launch checks of its ranks' user buffers before their programs reach each
//! other's (zero-copy, see `compile`): every peer reached is in the call, its buffers hold
//! what the programs reach and are aligned for their reductions, and no two ranks' device
//! buffers overlap where one of them is written (compile checked overlaps with each
//! rank's buffers as a space of their own, which this makes true). Then the table of
//! user buffers the kernel resolves peer operands through.

use super::CudaError;
use crate::ir::Rank;
use crate::slice_checks::{Unfit, UserReach};

/// One run's user buffers as its launch sees them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UserSide<'a> {
    pub rank: Rank,
    /// Bytes of (Input, Output) bound.
    pub lens: (usize, usize),
    /// Device addresses of (Input, Output) and whether they are one buffer; `None` for
    /// host slices, staged in buffers of the rank's own (aligned for any element).
    pub device: Option<(u64, u64, bool)>,
    /// How far the run's program reaches into its own (Input, Output).
    pub own: (usize, usize),
    /// How far it reaches into each peer's, by rank.
    pub peers: &'a [(Rank, UserReach)],
}

impl UserSide<'_> {
    /// Whether `peer`'s program may reach `reach` into these buffers: they hold it and,
    /// where it reduces, are aligned for it.
    fn admits(&self, peer: Rank, reach: &UserReach) -> Result<(), CudaError> {
        let addrs = self.device.map_or((0, 0), |(i, o, _)| (i, o));
        let rank = self.rank;
        reach.fits(self.lens, addrs).map_err(|unfit| match unfit {
            Unfit::Misaligned { buf, align } => CudaError::PeerBufferMisaligned {
                rank,
                peer,
                buf,
                align,
            },
            Unfit::TooShort { buf, len, needed } => CudaError::PeerBufferTooShort {
                rank,
                peer,
                buf,
                len,
                needed,
            },
        })
    }

    /// The device byte ranges `reach` covers, each with whether it is written.
    fn device_ranges(&self, reach: (usize, usize)) -> Vec<(u64, u64, bool)> {
        let Some((input, output, in_place)) = self.device else {
            return Vec::new();
        };
        let range =
            |addr: u64, len: usize, written| (addr, addr.saturating_add(len as u64), written);
        match in_place {
            true => vec![range(output, reach.0.max(reach.1), true)],
            false => vec![range(input, reach.0, false), range(output, reach.1, true)],
        }
    }
}

/// The bytes of (Input, Output) each side's buffers must hold in this launch: its own
/// program's reach and every peer program's, each checked against the buffers bound
/// ([`UserSide::admits`]). A program that reaches a rank not in the call is refused.
pub(crate) fn reach(
    ranks: usize,
    sides: &[UserSide<'_>],
) -> Result<Vec<(usize, usize)>, CudaError> {
    let mut reach: Vec<(usize, usize)> = sides.iter().map(|s| s.own).collect();
    let mut side_of = vec![None; ranks];
    for (i, side) in sides.iter().enumerate() {
        if let Some(at) = side_of.get_mut(side.rank) {
            *at = Some(i);
        }
    }
    for side in sides {
        for (peer, wants) in side.peers {
            let i = side_of
                .get(*peer)
                .copied()
                .flatten()
                .ok_or(CudaError::PeerNotInCall {
                    rank: side.rank,
                    peer: *peer,
                })?;
            sides[i].admits(side.rank, wants)?;
            reach[i].0 = reach[i].0.max(wants.extent.0);
            reach[i].1 = reach[i].1.max(wants.extent.1);
        }
    }
    Ok(reach)
}

/// Distinct ranks' device buffers do not overlap where one of them is written.
pub(crate) fn check_disjoint(
    sides: &[UserSide<'_>],
    reach: &[(usize, usize)],
) -> Result<(), CudaError> {
    let ranges = sides.iter().zip(reach).flat_map(|(side, &reach)| {
        side.device_ranges(reach)
            .into_iter()
            .map(move |(start, end, written)| (start, end, written, side.rank))
    });
    match first_overlap(ranges.collect()) {
        Some((rank, peer)) => Err(CudaError::UserBuffersOverlap { rank, peer }),
        None => Ok(()),
    }
}

/// Two ranks whose byte ranges `(start, end, written, rank)` overlap where one of them
/// is written, if any (sorted by start, so each range meets only those that begin
/// before it ends).
fn first_overlap(mut ranges: Vec<(u64, u64, bool, Rank)>) -> Option<(Rank, Rank)> {
    ranges.retain(|r| r.0 < r.1);
    ranges.sort_unstable();
    for (i, a) in ranges.iter().enumerate() {
        for b in ranges[i + 1..].iter().take_while(|b| b.0 < a.1) {
            if a.3 != b.3 && (a.2 || b.2) {
                return Some((a.3, b.3));
            }
        }
    }
    None
}

/// The launch's table of user buffers: (Input, Output) of every rank of the
/// communicator at `bases` (one per side), zero for a rank not in the call (which no
/// program reaches: see [`reach`]).
pub(crate) fn table(ranks: usize, sides: &[UserSide<'_>], bases: &[(u64, u64)]) -> Vec<u64> {
    let mut table = vec![0u64; 2 * ranks];
    for (side, &(input, output)) in sides.iter().zip(bases) {
        if let Some(pair) = table.get_mut(2 * side.rank..2 * side.rank + 2) {
            pair.copy_from_slice(&[input, output]);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Buf;

    fn wants(extent: (usize, usize), align: (usize, usize)) -> UserReach {
        UserReach { extent, align }
    }

    fn side(rank: Rank, peers: &[(Rank, UserReach)]) -> UserSide<'_> {
        UserSide {
            rank,
            lens: (1024, 1024),
            device: Some((
                0x10000 * (rank as u64 + 1),
                0x10000 * (rank as u64 + 1) + 0x8000,
                false,
            )),
            own: (128, 128),
            peers,
        }
    }

    #[test]
    fn a_rank_holds_the_most_any_program_reaches_into_it() {
        let into_1 = [(1, wants((512, 0), (4, 1)))];
        let into_0_and_1 = [
            (0, wants((0, 900), (1, 8))),
            (1, wants((256, 1000), (1, 1))),
        ];
        let sides = [side(0, &into_1), side(1, &into_0_and_1)];
        let reach = reach(2, &sides).unwrap();
        assert_eq!(reach, vec![(128, 900), (512, 1000)]);
        assert!(check_disjoint(&sides, &reach).is_ok());
        let bases = [(1, 2), (3, 4)];
        assert_eq!(table(3, &sides, &bases), vec![1, 2, 3, 4, 0, 0]);
    }

    #[test]
    fn a_peer_past_the_buffer_misaligned_or_absent_is_refused_naming_both_ranks() {
        let too_far = [(1, wants((0, 1025), (1, 1)))];
        let sides = [side(0, &too_far), side(1, &[])];
        let err = reach(2, &sides).unwrap_err();
        assert!(
            matches!(
                err,
                CudaError::PeerBufferTooShort {
                    rank: 1,
                    peer: 0,
                    buf: Buf::Output,
                    len: 1024,
                    needed: 1025
                }
            ),
            "{err}"
        );
        // Rank 1's output at an odd address, reduced as 8-byte elements by rank 0.
        let reduces = [(1, wants((0, 64), (1, 8)))];
        let mut odd = side(1, &[]);
        odd.device = Some((0x20000, 0x28004, false));
        let err = reach(2, &[side(0, &reduces), odd]).unwrap_err();
        assert!(
            matches!(
                err,
                CudaError::PeerBufferMisaligned {
                    rank: 1,
                    peer: 0,
                    align: 8,
                    ..
                }
            ),
            "{err}"
        );
        // Staged host slices are aligned for anything.
        odd.device = None;
        assert!(reach(2, &[side(0, &reduces), odd]).is_ok());
        let absent = [(2, wants((8, 8), (1, 1)))];
        let err = reach(3, &[side(0, &absent), side(1, &[])]).unwrap_err();
        assert!(
            matches!(err, CudaError::PeerNotInCall { rank: 0, peer: 2 }),
            "{err}"
        );
    }

    #[test]
    fn ranks_may_share_what_they_read_but_not_what_one_writes() {
        // Two inputs over the same bytes: both only read.
        let read = vec![(0, 100, false, 0), (50, 150, false, 1)];
        assert_eq!(first_overlap(read), None);
        // Rank 1's output starts inside rank 0's input.
        let written = vec![(0, 100, false, 0), (200, 300, true, 0), (99, 120, true, 1)];
        assert_eq!(first_overlap(written), Some((0, 1)));
        // A rank's own input and output may overlap (in place); empty ranges never do.
        let own = vec![(0, 100, false, 2), (0, 100, true, 2), (10, 10, true, 3)];
        assert_eq!(first_overlap(own), None);
        // Adjacent, not overlapping; and a long range that reaches past a short one.
        let adjacent = vec![(0, 100, true, 0), (100, 200, true, 1)];
        assert_eq!(first_overlap(adjacent), None);
        let long = vec![(0, 1000, true, 0), (10, 20, false, 0), (500, 501, false, 4)];
        assert_eq!(first_overlap(long), Some((0, 4)));
        // Through the sides: rank 1's output bound over rank 0's input.
        let mut a = side(0, &[]);
        let mut b = side(1, &[]);
        a.device = Some((0x1000, 0x9000, false));
        b.device = Some((0x5000, 0x1040, false));
        let err = check_disjoint(&[a, b], &[(128, 128), (128, 128)]).unwrap_err();
        assert!(
            matches!(err, CudaError::UserBuffersOverlap { rank: 0, peer: 1 }),
            "{err}"
        );
        // In place, one range of the larger reach.
        b.device = Some((0x1080, 0x1080, true));
        assert!(check_disjoint(&[a, b], &[(128, 128), (0, 0)]).is_ok());
        assert!(check_disjoint(&[a, b], &[(128, 128), (0, 1)]).is_ok());
        b.device = Some((0x1000 + 127, 0x1000 + 127, true));
        assert!(check_disjoint(&[a, b], &[(128, 128), (1, 0)]).is_err());
    }
}
