//! The process-wide cache of built-in choices, and the key that makes them pure.
//!
//! Modelling every candidate costs a recording and a replay each, so the built-in choice is
//! made once per [`Key`] per process. The key holds everything the choice depends on: the
//! operator, dtype, reduce op (normalised for operators that do not reduce) and root, the
//! **size bucket** (the power of two at or above the request's bytes per rank), the
//! topology (its `Debug` text: servers, fabrics, overrides and broken links, so two
//! topologies share an entry only if they are the same machine), the rank count, the
//! mode, in-place, the CCL buffer size and the link channels. The registry and the plugin
//! selectors are fixed for the life of the process, and overrides, plugin selectors and
//! tuning tables are consulted before the cache and never stored in it, so they need no
//! place in the key.
//!
//! The choice is computed from the key alone ([`Key::representative`] is the operation
//! modelled for a bucket), so every rank of a communicator gets the same answer whichever
//! rank asks first. Concurrent askers of one key wait for the first one's answer instead
//! of modelling it again.

use super::explain::Explanation;
use super::SelectRequest;
use crate::error::Error;
use crate::executor::{ExecutorEntry, Mode};
use crate::op::{OpKind, OpParam, VLayout};
use oxccl_platform::{DataType, Rank, ReduceOp};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Entries kept before the cache starts over (each is a few hundred bytes).
const CACHE_LIMIT: usize = 4096;

/// Everything a built-in choice depends on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub kind: OpKind,
    pub dtype: DataType,
    pub op: ReduceOp,
    pub root: Option<Rank>,
    /// Bytes per rank the choice is made for: a power of two, or 0.
    pub bucket: usize,
    pub topology: String,
    pub ranks: usize,
    pub mode: Mode,
    pub in_place: bool,
    pub ccl_bytes: usize,
    pub link_channels: usize,
    /// Each count unit above 1 that the operator's executors declare
    /// ([`crate::executor::Constraints::count_unit`]), sorted, with whether the call's count
    /// is a multiple of it: calls of one bucket whose counts differ there have different
    /// candidates.
    pub unit_fits: Vec<(usize, bool)>,
}

/// Each count unit above 1 of `kind`'s executors (read once, when the registry is built),
/// with whether `count` is a multiple of it: nothing is allocated when there is none.
fn unit_fits(kind: OpKind, count: usize) -> Vec<(usize, bool)> {
    let Ok(reg) = crate::registry::registry() else {
        return Vec::new();
    };
    reg.count_units(kind)
        .iter()
        .map(|&u| (u, count.is_multiple_of(u)))
        .collect()
}

/// The power of two at or above `bytes` (0 stays 0).
pub(super) fn size_bucket(bytes: usize) -> usize {
    match bytes {
        0 => 0,
        b => b.checked_next_power_of_two().unwrap_or(b),
    }
}

impl Key {
    pub fn new(req: &SelectRequest<'_>) -> Key {
        let op = req.op;
        Key {
            kind: op.kind,
            dtype: op.dtype,
            op: if op.kind.reduces() {
                op.op
            } else {
                ReduceOp::Sum
            },
            root: op.root.filter(|_| op.kind.has_root()),
            bucket: size_bucket(req.bytes),
            topology: format!("{:?}", req.topology),
            ranks: req.ranks,
            mode: req.mode,
            in_place: req.in_place,
            ccl_bytes: req.ccl_bytes,
            link_channels: req.link_channels,
            unit_fits: unit_fits(op.kind, op.count),
        }
    }

    /// Whether an executor of count unit `unit` can take the calls of this key.
    pub fn fits(&self, unit: usize) -> bool {
        unit <= 1 || self.unit_fits.iter().any(|&(u, fits)| u == unit && fits)
    }

    /// The operation the choice is made for: `bucket` bytes per rank of input (as
    /// [`SelectRequest::input_bytes`] counts them), with uniform packed blocks for the
    /// V forms. Not for the point-to-point operators, whose layouts differ per rank.
    pub fn representative(&self) -> OpParam {
        let es = self.dtype.size();
        let blocks_per_input = match self.kind {
            OpKind::ReduceScatterV => self.ranks,
            OpKind::AllGatherV => 1,
            kind => kind.buffer_counts(1, self.ranks).0.max(1),
        };
        // A multiple of every unit the calls of this key fit, so that the executors that
        // take them can plan it.
        let fitting = self
            .unit_fits
            .iter()
            .filter(|(_, fits)| *fits)
            .map(|&(u, _)| u);
        let step = fitting.fold(1usize, |l, u| crate::arith::lcm(l, u).unwrap_or(l));
        let count = (self.bucket / es)
            .div_ceil(blocks_per_input)
            .div_ceil(step)
            .saturating_mul(step);
        match self.kind {
            OpKind::Barrier => OpParam::barrier(),
            OpKind::AllGatherV | OpKind::ReduceScatterV => OpParam::vector(
                self.kind,
                VLayout::packed_blocks(&vec![count; self.ranks]),
                self.dtype,
                self.op,
            ),
            kind if kind.has_root() => {
                OpParam::rooted(kind, count, self.dtype, self.op, self.root.unwrap_or(0))
            }
            kind => OpParam::new(kind, count, self.dtype, self.op),
        }
    }
}

/// A built-in choice with what the tuning table and the explanation need.
#[derive(Debug)]
pub(super) struct Decision {
    pub chosen: &'static ExecutorEntry,
    /// The executors that could run (constraints hold, every link exists), by name.
    pub feasible: Vec<&'static ExecutorEntry>,
    pub reason: String,
    pub explanation: Arc<Explanation>,
}

type Slot = Arc<OnceLock<Result<Arc<Decision>, Error>>>;

fn cache() -> &'static Mutex<HashMap<Key, Slot>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Slot>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The decision for `key`, computed by `decide` on the first request of the process and
/// shared afterwards; `fresh` tells whether this call computed it.
pub(super) fn decision(
    key: Key,
    decide: impl FnOnce(&Key) -> Result<Decision, Error>,
) -> (Result<Arc<Decision>, Error>, bool) {
    let slot = {
        let mut map = cache().lock();
        if map.len() >= CACHE_LIMIT && !map.contains_key(&key) {
            map.clear();
        }
        map.entry(key.clone()).or_default().clone()
    };
    let mut fresh = false;
    let outcome = slot.get_or_init(|| {
        fresh = true;
        decide(&key).map(Arc::new)
    });
    (outcome.clone(), fresh)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_at_or_above() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(1), 1);
        assert_eq!(size_bucket(4000), 4096);
        assert_eq!(size_bucket(4096), 4096);
        assert_eq!(size_bucket(4097), 8192);
    }

    fn key(kind: OpKind, bucket: usize, ranks: usize) -> Key {
        Key {
            kind,
            dtype: DataType::F32,
            op: ReduceOp::Sum,
            root: Some(2),
            bucket,
            topology: String::new(),
            ranks,
            mode: Mode::Direct,
            in_place: false,
            ccl_bytes: 1 << 20,
            link_channels: 2,
            unit_fits: Vec::new(),
        }
    }

    #[test]
    fn the_representative_count_is_a_multiple_of_every_unit_the_calls_fit() {
        let mut k = key(OpKind::AllReduce, 4096, 3);
        k.unit_fits = vec![(3, true), (4, false), (384, false)];
        assert_eq!(
            k.representative().count,
            1026,
            "1024 elements rounded up to 3s"
        );
        assert!(k.fits(1) && k.fits(3) && !k.fits(4) && !k.fits(5));
        k.unit_fits = vec![(3, true), (4, true)];
        assert_eq!(k.representative().count, 1032);
    }

    #[test]
    fn representatives_have_the_bucket_as_input_per_rank() {
        let rep = key(OpKind::AllReduce, 4096, 8).representative();
        assert_eq!(rep.buffer_bytes(0, 8).0, 4096);
        let rep = key(OpKind::ReduceScatter, 1 << 20, 8).representative();
        assert_eq!(rep.buffer_bytes(3, 8).0, 1 << 20);
        let rep = key(OpKind::Broadcast, 1 << 20, 8).representative();
        assert_eq!(rep.root, Some(2));
        let rep = key(OpKind::AllGatherV, 1 << 12, 4).representative();
        assert_eq!(rep.layout(), Some(&VLayout::packed_blocks(&[1024; 4])));
        let rep = key(OpKind::ReduceScatterV, 1 << 12, 4).representative();
        assert_eq!(rep.layout(), Some(&VLayout::packed_blocks(&[256; 4])));
        assert_eq!(
            key(OpKind::Barrier, 0, 4).representative(),
            OpParam::barrier()
        );
    }
}
