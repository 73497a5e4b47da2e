//! From measured copy rates to the figures of the host model (the framework's
//! `Processor`).
//!
//! The probe measures one thread's copy rate at a ladder of footprints (a copy of `B`
//! bytes touches `2B`). The host model has one cache level: a footprint up to
//! `cache_bytes` is copied at `cache_gbps`, a larger one has the share `cache_bytes /
//! footprint` of its traffic served so and the rest at `thread_gbps` (the framework's
//! `Processor::cached_share`). The figures are those with which that formula best
//! reproduces the ladder:
//!
//! - `thread_gbps`: the rate at the largest footprint, which no cache holds;
//! - `cache_bytes` and `cache_gbps`: for each footprint of the ladder as `cache_bytes`,
//!   the median rate of the points within it as `cache_gbps`; of those pairs, the one
//!   whose times are nearest the ladder's (least squared relative error);
//! - `llc_bytes`: the largest footprint before the rate first falls below halfway between
//!   `cache_gbps` and `thread_gbps` (0 when it never does: no store to memory seen).

/// One thread's copy rate with a footprint of `footprint` bytes (source and destination).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Rate {
    pub footprint: usize,
    pub gbps: f64,
}

/// The cache figures the ladder gives.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CacheFit {
    pub thread_gbps: f64,
    pub cache_bytes: usize,
    pub cache_gbps: f64,
    pub llc_bytes: usize,
}

/// The figures that reproduce `ladder` best (see the module docs); `None` for a ladder
/// with no point or a rate that is not a positive number.
pub fn fit(ladder: &[Rate]) -> Option<CacheFit> {
    if ladder.iter().any(|r| !(r.gbps.is_finite() && r.gbps > 0.0)) {
        return None;
    }
    let mut sorted = ladder.to_vec();
    sorted.sort_by_key(|r| r.footprint);
    let thread_gbps = sorted.last()?.gbps;
    let (cache_bytes, cache_gbps) = sorted
        .iter()
        .map(|r| {
            let gbps = cache_gbps_within(&sorted, r.footprint, thread_gbps);
            (
                r.footprint,
                gbps,
                error(&sorted, r.footprint, gbps, thread_gbps),
            )
        })
        .min_by(|a, b| a.2.total_cmp(&b.2))
        .map(|(bytes, gbps, _)| (bytes, gbps))?;
    let halfway = (cache_gbps + thread_gbps) / 2.0;
    let llc_bytes = match sorted.iter().position(|r| r.gbps < halfway) {
        Some(0) | None => 0,
        Some(i) => sorted[i - 1].footprint,
    };
    Some(CacheFit {
        thread_gbps,
        cache_bytes,
        cache_gbps,
        llc_bytes,
    })
}

/// The share of a footprint's traffic a cache of `cache` bytes serves: all of it when the
/// footprint fits, else the share of the footprint it holds. The host model's rule
/// (the framework's `Processor::cached_share` calls this), so the fit reproduces the
/// ladder with the very formula the model applies.
pub fn cached_share(cache: usize, footprint: usize) -> f64 {
    match footprint <= cache {
        true => 1.0,
        false => cache as f64 / footprint as f64,
    }
}

/// The cache rate with `cache` bytes cached: the median rate of the points within it
/// (a cache level below, like a core's own cache at the smallest footprints, is one
/// point among several and does not pull it up), never below the thread's rate.
fn cache_gbps_within(ladder: &[Rate], cache: usize, thread_gbps: f64) -> f64 {
    let mut within: Vec<f64> = ladder
        .iter()
        .filter(|r| r.footprint <= cache)
        .map(|r| r.gbps)
        .collect();
    within.sort_by(f64::total_cmp);
    let median = match within.len() {
        0 => return thread_gbps,
        n if n % 2 == 1 => within[n / 2],
        n => (within[n / 2 - 1] + within[n / 2]) / 2.0,
    };
    median.max(thread_gbps)
}

/// The squared relative error in time of the model over `ladder`.
fn error(ladder: &[Rate], cache: usize, cache_gbps: f64, thread_gbps: f64) -> f64 {
    ladder
        .iter()
        .map(|r| {
            let s = cached_share(cache, r.footprint);
            let modelled = s / cache_gbps + (1.0 - s) / thread_gbps;
            (r.gbps * modelled - 1.0).powi(2)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn ladder(rates: &[(usize, f64)]) -> Vec<Rate> {
        rates
            .iter()
            .map(|&(mib, gbps)| Rate {
                footprint: mib * MIB,
                gbps,
            })
            .collect()
    }

    #[test]
    fn a_ladder_made_by_the_model_gives_its_figures_back() {
        let (cache, cache_gbps, thread) = (16 * MIB, 40.0, 10.0);
        let points: Vec<Rate> = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096]
            .iter()
            .map(|&mib| {
                let s = cached_share(cache, mib * MIB);
                Rate {
                    footprint: mib * MIB,
                    gbps: 1.0 / (s / cache_gbps + (1.0 - s) / thread),
                }
            })
            .collect();
        let f = fit(&points).unwrap();
        assert_eq!(f.cache_bytes, cache);
        assert_eq!(f.cache_gbps, cache_gbps);
        assert!(
            f.thread_gbps > thread && f.thread_gbps < thread * 1.02,
            "{f:?}"
        );
        // Halfway (25 GB/s) is passed between 16 MiB (40) and 32 MiB (16).
        assert_eq!(f.llc_bytes, 16 * MIB);
    }

    #[test]
    fn a_machine_whose_rate_falls_twice_is_fitted_at_its_last_level() {
        // A 2-core VM of November 2026 (`memcpy_bench 1 N 50`, best of 50, footprints
        // 2N): L2 up to 2 MiB, then the last level at about 13 GB/s to 64 MiB, then memory.
        let f = fit(&ladder(&[
            (2, 28.3),
            (4, 13.9),
            (8, 13.4),
            (16, 13.5),
            (32, 13.2),
            (64, 13.3),
            (128, 6.9),
            (256, 6.0),
        ]))
        .unwrap();
        assert_eq!(f.thread_gbps, 6.0);
        assert_eq!(f.cache_bytes, 64 * MIB);
        assert_eq!(f.cache_gbps, 13.45);
        assert_eq!(f.llc_bytes, 64 * MIB);
    }

    #[test]
    fn no_cache_seen_gives_the_thread_rate_everywhere_and_no_llc() {
        let f = fit(&ladder(&[(2, 10.0), (8, 10.0), (64, 10.0)])).unwrap();
        assert_eq!((f.thread_gbps, f.cache_gbps, f.llc_bytes), (10.0, 10.0, 0));
        // A rate that only rises with the footprint leaves the cache rate at the floor.
        let f = fit(&ladder(&[(2, 5.0), (8, 8.0), (64, 10.0)])).unwrap();
        assert_eq!((f.cache_gbps, f.llc_bytes), (10.0, 0));
    }

    #[test]
    fn an_empty_ladder_or_a_bad_rate_gives_nothing() {
        assert_eq!(fit(&[]), None);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(fit(&ladder(&[(2, 10.0), (4, bad)])), None);
        }
    }
}
