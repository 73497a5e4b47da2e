//! Taking the machine's load out of one size's times: each round's drift, shared by the
//! executors measured in it, estimated and divided out.
//!
//! At a size, one round measures its executors one after another within a second or
//! two; the next round at that size comes a whole sweep of sizes later. Other processes'
//! load drifts over seconds to minutes, so it moves whole rounds: an executor's time is
//! its speed times its round's load, plus noise of its own. The median of each point's
//! rounds, taken alone, keeps that load in: a round in a quiet stretch lowers every
//! executor measured in it, and the contender rounds measure only a few, so an executor
//! whose extra rounds fell in a quiet stretch beat one that had no extra rounds, or
//! whose extra rounds were loud. On the 2-core development machine a tune's pick check
//! printed, for a 512 KiB AllReduce, `mesh-push 104.41 115.00 111.59 80.88 81.30` against
//! `mesh 79.15 83.04 138.79 83.35 89.33` µs: medians 1.25x apart, while round by round
//! the ratios were 1.32, 1.38, 0.80, 0.97 and 0.91. From the same rounds of two full
//! tunes (`tune --all --ranks 8 -b 1K -e 64M -f 8`, 73 sizes), the executor one found
//! fastest was within 10% of the other's fastest at 72 and 71 sizes with the load taken
//! out, at 69 and 68 with plain medians.
//!
//! The estimate is Tukey's median polish in the log domain (time = speed x load):
//! alternately, each round's load is the median over its executors of their times over
//! their levels, and each executor's level the median over its rounds of its times over
//! the rounds' loads; the loads are scaled so that the median round's is 1, which keeps
//! the times on the scale of a typical round. Medians throughout: a lone loud point (one
//! executor's burst) neither moves its round's load nor its executor's level, and a lone
//! quiet round (a third faster than the rest, now and then) does not make whichever
//! executor it measured the fastest. Never the fastest round either, for that reason.
//! With one round the times are the measured ones.

use super::sweep::RoundTime;

/// Polish sweeps: the fit settles within a few; more change nothing printed.
const SWEEPS: usize = 10;

/// One size's times with the rounds' load taken out.
#[derive(Debug, PartialEq)]
pub struct Levelled {
    /// Per executor (in the order given), its time in µs to the hundredth, at least 0.01.
    pub times: Vec<f64>,
    /// Each round's load: `(round, factor)`, rounds ascending, the median factor 1.
    pub load: Vec<(usize, f64)>,
}

/// Level `rows`: the rounds of each executor measured at one size.
pub fn level(rows: &[&[RoundTime]]) -> Levelled {
    let logs: Vec<Vec<(usize, f64)>> = rows
        .iter()
        .map(|row| row.iter().map(|t| (t.round, t.us.max(1e-6).ln())).collect())
        .collect();
    let mut rounds: Vec<usize> = logs.iter().flatten().map(|(r, _)| *r).collect();
    rounds.sort_unstable();
    rounds.dedup();
    // Every row's rounds are in `rounds`: the search always finds them.
    let index = |round: usize| rounds.binary_search(&round).unwrap_or(0);
    let mut load = vec![0.0; rounds.len()];
    let mut levels: Vec<f64> = logs.iter().map(|row| level_of(row, &load, index)).collect();
    for _ in 0..SWEEPS {
        load = loads(&logs, &levels, rounds.len(), index);
        levels = logs.iter().map(|row| level_of(row, &load, index)).collect();
    }
    Levelled {
        times: levels.iter().map(|l| hundredths(l.exp())).collect(),
        load: rounds
            .iter()
            .zip(&load)
            .map(|(r, l)| (*r, l.exp()))
            .collect(),
    }
}

/// An executor's level: the median over its rounds of its log time less the round's load.
fn level_of(row: &[(usize, f64)], load: &[f64], index: impl Fn(usize) -> usize) -> f64 {
    median(row.iter().map(|(r, y)| y - load[index(*r)]).collect()).unwrap_or(0.0)
}

/// Each round's log load: the median over the executors measured in it of their log time
/// less their level, then all shifted so that the median round's is 0.
fn loads(
    logs: &[Vec<(usize, f64)>],
    levels: &[f64],
    rounds: usize,
    index: impl Fn(usize) -> usize,
) -> Vec<f64> {
    let mut residuals: Vec<Vec<f64>> = vec![vec![]; rounds];
    for (row, level) in logs.iter().zip(levels) {
        for (r, y) in row {
            residuals[index(*r)].push(y - level);
        }
    }
    let load: Vec<f64> = residuals
        .into_iter()
        .map(|r| median(r).unwrap_or(0.0))
        .collect();
    let centre = median(load.clone()).unwrap_or(0.0);
    load.iter().map(|l| l - centre).collect()
}

/// The median of `values` (the mean of the middle two for an even count); none if empty.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// `us` to the hundredth of a µs (finer is below the noise), never 0 (the table's format
/// refuses 0).
pub fn hundredths(us: f64) -> f64 {
    ((us * 100.0).round() / 100.0).max(0.01)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rounds(times: &[(usize, f64)]) -> Vec<RoundTime> {
        times
            .iter()
            .map(|&(round, us)| RoundTime { round, us })
            .collect()
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() <= 0.011
    }

    #[test]
    fn a_load_shared_by_a_round_cancels_out() {
        // Speeds 10, 11 and 12 µs; rounds 1 and 2 loaded 1.5x; the third executor, not a
        // contender, has no rounds 4 and 5. Its median alone would be 18: 1.8x the first.
        let load = [1.5, 1.5, 1.0, 1.0, 1.0];
        let row = |speed: f64, n: usize| -> Vec<RoundTime> {
            let t: Vec<(usize, f64)> = (0..n).map(|i| (i + 1, speed * load[i])).collect();
            rounds(&t)
        };
        let (a, b, c) = (row(10.0, 5), row(11.0, 5), row(12.0, 3));
        let got = level(&[&a, &b, &c]);
        assert!(near(got.times[1] / got.times[0], 1.1), "{got:?}");
        assert!(near(got.times[2] / got.times[0], 1.2), "{got:?}");
        let loads: Vec<f64> = got.load.iter().map(|(_, l)| l / got.load[4].1).collect();
        for (l, want) in loads.iter().zip(load) {
            assert!((l - want).abs() < 1e-9, "{got:?}");
        }
    }

    #[test]
    fn a_lone_loud_point_moves_neither_its_round_nor_its_executor() {
        let a = rounds(&[(1, 10.0), (2, 10.0), (3, 10.0)]);
        let b = rounds(&[(1, 11.0), (2, 30.0), (3, 11.0)]);
        let c = rounds(&[(1, 20.0), (2, 20.0), (3, 20.0)]);
        let got = level(&[&a, &b, &c]);
        assert_eq!(got.times, vec![10.0, 11.0, 20.0]);
        assert_eq!(got.load, vec![(1, 1.0), (2, 1.0), (3, 1.0)]);
    }

    #[test]
    fn a_lone_quiet_round_does_not_make_the_fastest() {
        // `ring`'s second round ran in a quiet stretch that nothing else shared.
        let ring = rounds(&[(1, 9800.0), (2, 7062.0), (3, 9750.0)]);
        let mesh = rounds(&[(1, 9691.0), (2, 9700.0), (3, 9650.0)]);
        let got = level(&[&ring, &mesh]);
        assert!(got.times[0] > got.times[1], "{got:?}");
    }

    #[test]
    fn one_round_keeps_the_measured_times() {
        let a = rounds(&[(1, 1.234_56)]);
        let b = rounds(&[(1, 0.001)]);
        let got = level(&[&a, &b]);
        assert_eq!(got.times, vec![1.23, 0.01]);
        // One executor: its rounds' geometric middle (the log domain's median).
        let alone = rounds(&[(1, 3.0), (2, 4.0)]);
        assert_eq!(level(&[&alone]).times, vec![3.46]);
        assert_eq!(
            level(&[]),
            Levelled {
                times: vec![],
                load: vec![]
            }
        );
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![9691.0, 7062.0, 9800.0]), Some(9691.0));
        assert_eq!(median(vec![]), None);
    }
}
