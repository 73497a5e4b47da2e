//! A map from byte intervals to values, the one data structure of the data-flow checks.
//!
//! Bytes that were never assigned have no value (`None`). Assigning an interval splits the
//! segments it cuts, replaces the ones it covers, and merges with equal neighbours, so a
//! buffer that a thousand tasks filled with one kind of value ends as one segment. Cost
//! per operation: `O(log s + k)` for `s` segments of which `k` are touched.

use std::collections::BTreeMap;

/// Values over byte intervals of one memory.
#[derive(Clone, Debug)]
pub(crate) struct IntervalMap<V> {
    /// start -> (end, value); segments never overlap.
    segs: BTreeMap<usize, (usize, V)>,
}

impl<V> Default for IntervalMap<V> {
    fn default() -> Self {
        IntervalMap {
            segs: BTreeMap::new(),
        }
    }
}

impl<V: Clone + PartialEq> IntervalMap<V> {
    /// The pieces of `[lo, hi)`: maximal runs of one value (or of none), in order.
    pub fn pieces(&self, lo: usize, hi: usize) -> Vec<(usize, usize, Option<V>)> {
        let mut out = Vec::with_capacity(1);
        let mut at = hi;
        for (&s, (e, v)) in self.segs.range(..hi).rev() {
            if *e <= lo {
                break;
            }
            let end = (*e).min(hi);
            if end < at {
                out.push((end, at, None));
            }
            at = s.max(lo);
            out.push((at, end, Some(v.clone())));
            if s <= lo {
                break;
            }
        }
        if at > lo {
            out.push((lo, at, None));
        }
        out.reverse();
        out
    }

    /// Replace every piece of `[lo, hi)` by what `f` makes of it. When `[lo, hi)` is
    /// exactly one stored segment (the common case: a task touching what one earlier task
    /// wrote) the value is updated in place, with one search and no merging.
    pub fn update(
        &mut self,
        lo: usize,
        hi: usize,
        mut f: impl FnMut(usize, usize, Option<&V>) -> Option<V>,
    ) {
        if lo >= hi {
            return;
        }
        if let Some((_, (e, v))) = self.segs.range_mut(lo..=lo).next() {
            if *e == hi {
                match f(lo, hi, Some(v)) {
                    Some(new) => *v = new,
                    None => {
                        self.segs.remove(&lo);
                    }
                }
                return;
            }
        }
        let in_gap = self
            .segs
            .range(..hi)
            .next_back()
            .is_none_or(|(_, (e, _))| *e <= lo);
        if in_gap {
            let new = f(lo, hi, None);
            self.fill_gap(lo, hi, new);
            return;
        }
        for (a, b, v) in self.pieces(lo, hi) {
            let new = f(a, b, v.as_ref());
            self.assign(a, b, new);
        }
    }

    /// Change every piece of `[lo, hi)` in place with `f` (bytes without a value start
    /// from `V::default()`). Cheaper than [`Self::update`] when `f` keeps most of the
    /// value (a growing read set): the exact-segment case edits the stored value without
    /// a copy.
    pub fn modify(&mut self, lo: usize, hi: usize, mut f: impl FnMut(usize, usize, &mut V))
    where
        V: Default,
    {
        if lo >= hi {
            return;
        }
        if let Some((_, (e, v))) = self.segs.range_mut(lo..=lo).next() {
            if *e == hi {
                return f(lo, hi, v);
            }
        }
        self.update(lo, hi, |a, b, old| {
            let mut v = old.cloned().unwrap_or_default();
            f(a, b, &mut v);
            Some(v)
        });
    }

    /// Give `[lo, hi)` the value `v` (`None`: forget it).
    pub fn assign(&mut self, lo: usize, hi: usize, v: Option<V>) {
        if lo >= hi {
            return;
        }
        if self.replace_exact(lo, hi, &v) {
            return;
        }
        self.split(lo);
        self.split(hi);
        let covered: Vec<usize> = self.segs.range(lo..hi).map(|(&s, _)| s).collect();
        covered.iter().for_each(|s| {
            self.segs.remove(s);
        });
        self.fill_gap(lo, hi, v);
    }

    /// Fast path of `assign`: `[lo, hi)` is exactly one segment and neither neighbour can
    /// merge with the new value.
    fn replace_exact(&mut self, lo: usize, hi: usize, v: &Option<V>) -> bool {
        let Some(v) = v else {
            return false;
        };
        let Some((end, old)) = self.segs.get(&lo) else {
            return false;
        };
        if *end != hi || old == v {
            return *end == hi;
        }
        let prev_merges = self
            .segs
            .range(..lo)
            .next_back()
            .is_some_and(|(_, (e, pv))| *e == lo && pv == v);
        let next_merges = self.segs.get(&hi).is_some_and(|(_, nv)| nv == v);
        if prev_merges || next_merges {
            return false;
        }
        if let Some(slot) = self.segs.get_mut(&lo) {
            slot.1 = v.clone();
        }
        true
    }

    /// Give `[lo, hi)`, which no segment overlaps, the value `v`, merging with equal
    /// neighbours.
    fn fill_gap(&mut self, lo: usize, hi: usize, v: Option<V>) {
        let Some(v) = v else {
            return;
        };
        let (mut start, mut end) = (lo, hi);
        if let Some((&s, (e, pv))) = self.segs.range(..lo).next_back() {
            if *e == lo && *pv == v {
                start = s;
            }
        }
        if let Some((e, nv)) = self.segs.get(&hi) {
            if *nv == v {
                end = *e;
                self.segs.remove(&hi);
            }
        }
        self.segs.insert(start, (end, v));
    }

    /// Make `x` a segment boundary.
    fn split(&mut self, x: usize) {
        let Some((&s, (e, v))) = self.segs.range(..x).next_back() else {
            return;
        };
        if *e > x {
            let (e, v) = (*e, v.clone());
            self.segs.insert(s, (x, v.clone()));
            self.segs.insert(x, (e, v));
        }
    }

    /// Segments currently stored.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.segs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assign_splits_replaces_and_merges() {
        let mut m = IntervalMap::default();
        m.assign(0, 100, Some(1));
        m.assign(40, 60, Some(2));
        assert_eq!(
            m.pieces(0, 100),
            vec![(0, 40, Some(1)), (40, 60, Some(2)), (60, 100, Some(1))]
        );
        m.assign(40, 60, Some(1));
        assert_eq!(m.len(), 1);
        m.assign(90, 120, None);
        assert_eq!(m.pieces(80, 130), vec![(80, 90, Some(1)), (90, 130, None)]);
        assert_eq!(m.pieces(200, 210), vec![(200, 210, None)]);
    }

    #[test]
    fn modify_edits_in_place_and_splits_like_update() {
        let mut m = IntervalMap::default();
        m.assign(0, 100, Some(1));
        // Exact segment: edited in place.
        m.modify(0, 100, |_, _, v| *v += 1);
        assert_eq!(m.pieces(0, 100), vec![(0, 100, Some(2))]);
        // Straddling a segment end and a gap: split, the gap starts from the default.
        m.modify(50, 150, |_, _, v| *v += 10);
        assert_eq!(
            m.pieces(0, 150),
            vec![(0, 50, Some(2)), (50, 100, Some(12)), (100, 150, Some(10))]
        );
    }
}
