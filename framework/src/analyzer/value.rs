//! Symbolic values: what a byte range holds, as a function of the ranks' inputs.
//!
//! A [`Value`] on the byte interval `[a, b)` of some buffer says: for every byte `x` in
//! it, the element there is `op` applied over the terms `Input_r[x + shift]`. The terms are
//! a multiset of `(rank, shift)` pairs, stored as [`Run`]s of consecutive ranks with one
//! shift and one multiplicity, in a canonical order, so equal multisets have equal
//! representations and a 1024-rank reduction costs one or two runs. Because shifts are
//! relative to the position, a value is the same wherever it sits: copying moves it by
//! adjusting the shifts, and neighbouring segments holding equal values merge.
//!
//! A value with a single term is a plain copy of an input and has no reduce op; a value
//! with several terms remembers the op that combined them, so mixing ops is caught.

use oxccl_platform::{Rank, ReduceOp};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Consecutive ranks `lo..hi`, each contributing `Input_r[x + shift]` `count` times.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Run {
    pub shift: i64,
    pub lo: u32,
    pub hi: u32,
    pub count: u32,
}

/// A multiset of `(rank, shift)` terms in canonical form: sorted by shift then rank,
/// runs of one shift never overlap, and touching runs of one shift and count are merged.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Terms(Arc<[Run]>);

impl Terms {
    /// Ranks `ranks`, each once, at `shift`.
    pub fn ranks(ranks: std::ops::Range<Rank>, shift: i64) -> Terms {
        if ranks.is_empty() {
            return Terms::default();
        }
        Terms(Arc::new([Run {
            shift,
            lo: ranks.start as u32,
            hi: ranks.end as u32,
            count: 1,
        }]))
    }

    /// The runs, in canonical order.
    pub fn runs(&self) -> &[Run] {
        &self.0
    }

    /// Number of terms, with multiplicity.
    pub fn len(&self) -> u64 {
        self.0
            .iter()
            .map(|r| u64::from(r.hi - r.lo) * u64::from(r.count))
            .sum()
    }

    /// True when there is no term.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every shift moved by `delta` (the value seen from a position `delta` bytes earlier).
    pub fn shifted(&self, delta: i64) -> Terms {
        if delta == 0 {
            return self.clone();
        }
        Terms(
            self.0
                .iter()
                .map(|r| Run {
                    shift: r.shift + delta,
                    ..*r
                })
                .collect(),
        )
    }

    /// The multiset union of several term sets, each moved by its own delta.
    pub fn union<'a>(parts: impl IntoIterator<Item = (&'a Terms, i64)>) -> Terms {
        let mut events: Vec<(i64, u32, i64)> = Vec::new();
        for (t, delta) in parts {
            for r in t.0.iter() {
                events.push((r.shift + delta, r.lo, i64::from(r.count)));
                events.push((r.shift + delta, r.hi, -i64::from(r.count)));
            }
        }
        // Each part's events are already in order (its runs are canonical), so the stable
        // sort, which finds and merges presorted runs, merges them in linear time: a
        // reduction step of recursive halving unites two strided rank sets of n/2 runs
        // each, thousands of times per rank.
        events.sort();
        let mut runs: Vec<Run> = Vec::new();
        let mut i = 0;
        while i < events.len() {
            let shift = events[i].0;
            let mut count = 0i64;
            while i < events.len() && events[i].0 == shift {
                let at = events[i].1;
                while i < events.len() && events[i].0 == shift && events[i].1 == at {
                    count += events[i].2;
                    i += 1;
                }
                let next = events.get(i).filter(|e| e.0 == shift).map(|e| e.1);
                if let (Some(next), true) = (next, count > 0) {
                    push_run(
                        &mut runs,
                        Run {
                            shift,
                            lo: at,
                            hi: next,
                            count: count as u32,
                        },
                    );
                }
            }
        }
        Terms(runs.into())
    }

    /// Every rank with the shifts it contributes at (one entry per contribution).
    pub fn by_rank(&self) -> BTreeMap<u32, Vec<i64>> {
        let mut m: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
        for r in self.0.iter() {
            for rank in r.lo..r.hi {
                let shifts = m.entry(rank).or_default();
                shifts.resize(shifts.len() + r.count as usize, r.shift);
            }
        }
        m
    }
}

fn push_run(runs: &mut Vec<Run>, r: Run) {
    if let Some(last) = runs.last_mut() {
        if last.shift == r.shift && last.hi == r.lo && last.count == r.count {
            last.hi = r.hi;
            return;
        }
    }
    runs.push(r);
}

/// What a byte interval holds (`None` where it holds nothing defined yet).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Value {
    /// The op that combined the terms; `None` for a single term.
    pub op: Option<ReduceOp>,
    pub terms: Terms,
}

impl Value {
    /// Rank `rank`'s own input at `shift`.
    pub fn input(rank: Rank, shift: i64) -> Value {
        Value {
            op: None,
            terms: Terms::ranks(rank..rank + 1, shift),
        }
    }

    /// `op` over `terms`; the op is dropped when there is only one term.
    pub fn reduced(op: ReduceOp, terms: Terms) -> Value {
        let op = (terms.len() > 1).then_some(op);
        Value { op, terms }
    }

    /// The same value seen from `delta` bytes earlier.
    pub fn shifted(&self, delta: i64) -> Value {
        Value {
            op: self.op,
            terms: self.terms.shifted(delta),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs: Vec<String> = self
            .terms
            .runs()
            .iter()
            .map(|r| {
                let ranks = if r.hi - r.lo == 1 {
                    format!("rank {}", r.lo)
                } else {
                    format!("ranks {}..{}", r.lo, r.hi)
                };
                let times = if r.count > 1 {
                    format!(" x{}", r.count)
                } else {
                    String::new()
                };
                format!("{ranks} at {:+}{times}", r.shift)
            })
            .collect();
        match self.op {
            Some(op) => write!(f, "{op:?} of Input of [{}]", runs.join(", ")),
            None => write!(f, "Input of [{}]", runs.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_is_canonical_and_counts_duplicates() {
        let a = Terms::ranks(0..3, 0);
        let b = Terms::ranks(3..5, 0);
        assert_eq!(Terms::union([(&a, 0), (&b, 0)]), Terms::ranks(0..5, 0));
        assert_eq!(Terms::union([(&b, 0), (&a, 0)]), Terms::ranks(0..5, 0));
        let dup = Terms::union([(&Terms::ranks(0..3, 0), 0), (&Terms::ranks(1..2, 0), 0)]);
        assert_eq!(dup.len(), 4);
        assert_eq!(dup.by_rank()[&1], vec![0, 0]);
        let moved = Terms::union([(&a, 8), (&b, 0)]);
        assert_eq!(moved.runs().len(), 2);
        assert_eq!(moved.by_rank()[&0], vec![8]);
    }
}
