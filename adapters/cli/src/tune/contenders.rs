//! The executors that get more rounds at a size: those its first rounds left near the
//! fastest, and the model's pick.
//!
//! The first rounds rank every executor; what the table and the pick check turn on is
//! the order among the few near the top. On the 2-core development machine the points
//! within 1.25x of the fastest in two full tunes (294) moved between them by 1.4% in the
//! median, by 12.5% at the 90th percentile and by up to 29% (across earlier tunes, the
//! 8-rank 512 KiB AllReduce by `mesh-push` measured 110 to 180 µs); and with a dozen
//! executors at a size the fastest of their medians is biased low by whichever had the
//! quietest rounds. More rounds for the
//! contenders narrow their medians where it matters, without measuring the executors
//! that are 2x off again.

use super::sweep::Outcome;
use super::twins::Twins;
use oxccl::framework::executor::ExecutorEntry;

/// Executors within this factor of a size's fastest after the first rounds are its
/// contenders: about the most a point moved between two tunes on the development
/// machine (see the module doc).
pub const CONTENDER_RATIO: f64 = 1.25;

/// The measured executors of `groups` (one size's) to measure again at `size`: those
/// within [`CONTENDER_RATIO`] of the fastest, and the group of the model's pick, in
/// `groups`' order. None when nothing was measured at `size`.
pub fn contenders(outcome: &Outcome, size: usize, groups: &[Twins]) -> Vec<&'static ExecutorEntry> {
    let time = |name: &str| outcome.point_of(size, name).map(|p| p.entry.time_us);
    let times: Vec<Option<f64>> = groups.iter().map(|g| time(g.measured.name)).collect();
    let Some(fastest) = outcome.fastest_at(size).map(|p| p.entry.time_us) else {
        return vec![];
    };
    let pick = outcome.pick_at(size);
    let holds_pick = |g: &Twins| pick.is_some_and(|p| g.holds(p));
    groups
        .iter()
        .zip(&times)
        .filter(|(g, t)| t.is_some_and(|t| t <= fastest * CONTENDER_RATIO || holds_pick(g)))
        .map(|(g, _)| g.measured)
        .collect()
}

/// The measured executors of `groups` (one size's) that decide its pick checks, to
/// measure again side by side at `size`: the groups of the `named` executors (select_alg's
/// pick, and a reference table's fastest) and the fastest group holding none of them,
/// their rival, in `groups`' order. None when fewer than two such groups were measured.
///
/// The contender rounds leave each point with five rounds by default, and one
/// executor's rounds at a size sometimes run slow in a stretch of three (an 8-rank 8 KiB
/// ReduceScatter, `hier-ring`: 4.77, 5.54, 5.45, 4.15, 4.22 µs, against
/// `hier-put-ring`'s 4.39, 4.17, 4.15, 4.12, 4.17), so a check turns on which of two
/// close executors had the quieter stretch. Every pick is measured again with its rival,
/// whether it passes or not, so the rounds that decide it do not depend on how it came
/// out.
pub fn deciders(
    outcome: &Outcome,
    size: usize,
    groups: &[Twins],
    named: &[&str],
) -> Vec<&'static ExecutorEntry> {
    let measured: Vec<(&Twins, f64)> = groups
        .iter()
        .filter_map(|g| Some((g, outcome.point_of(size, g.measured.name)?.entry.time_us)))
        .collect();
    let holds_named = |g: &Twins| named.iter().any(|n| g.holds(n));
    let rival = measured
        .iter()
        .filter(|(g, _)| !holds_named(g))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(g, _)| *g);
    let chosen: Vec<&'static ExecutorEntry> = measured
        .iter()
        .filter(|(g, _)| holds_named(g) || rival.is_some_and(|r| std::ptr::eq(r, *g)))
        .map(|(g, _)| g.measured)
        .collect();
    match chosen.len() {
        0 | 1 => vec![],
        _ => chosen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::sweep::point;
    use oxccl::{registry, OpKind};

    /// AllReduce executors by name, from the registry (they must be `'static`).
    fn entry(name: &str) -> &'static ExecutorEntry {
        let all = registry()
            .expect("registry")
            .executors_for(OpKind::AllReduce);
        all.into_iter().find(|e| e.name == name).expect(name)
    }

    fn alone(name: &str) -> Twins {
        Twins {
            measured: entry(name),
            twins: vec![],
        }
    }

    fn names(entries: &[&ExecutorEntry]) -> Vec<&'static str> {
        entries.iter().map(|e| e.name).collect()
    }

    /// Five groups measured at 1024 B, `relay-mesh` with a twin: `mesh` the fastest
    /// (10 µs), `rhd` (12.5) and `nb` (12.6) beside 1.25x of it, `ring` and `relay-mesh`
    /// 2x and 3x off.
    fn sample() -> (Vec<Twins>, Outcome) {
        let groups = vec![
            alone("ring"),
            alone("mesh"),
            Twins {
                measured: entry("relay-mesh"),
                twins: vec![entry("relay-mesh-single")],
            },
            alone("rhd"),
            alone("nb"),
        ];
        let outcome = Outcome {
            points: vec![
                point(1024, "ring", 20.0),
                point(1024, "mesh", 10.0),
                point(1024, "relay-mesh", 30.0),
                point(1024, "rhd", 12.5),
                point(1024, "nb", 12.6),
            ],
            ..Outcome::default()
        };
        (groups, outcome)
    }

    #[test]
    fn contenders_are_the_executors_near_the_fastest_and_the_picks_group() {
        let (groups, mut outcome) = sample();
        // 1.25x of 10 is the edge: rhd is in, nb just out.
        let near = contenders(&outcome, 1024, &groups);
        assert_eq!(names(&near), vec!["mesh", "rhd"]);
        // The pick, a twin of an executor 3x off, brings its group in.
        outcome.picks = vec![(1024, Ok("relay-mesh-single".into()))];
        let near = contenders(&outcome, 1024, &groups);
        assert_eq!(names(&near), vec!["mesh", "relay-mesh", "rhd"]);
        // Nothing measured at a size: no contenders, even for a pick.
        outcome.picks.push((4096, Ok("mesh".into())));
        assert!(contenders(&outcome, 4096, &groups).is_empty());
    }

    #[test]
    fn deciders_are_the_named_picks_groups_and_their_fastest_rival() {
        let (groups, outcome) = sample();
        // A pick that is not the fastest: it and the fastest.
        let d = deciders(&outcome, 1024, &groups, &["ring"]);
        assert_eq!(names(&d), vec!["ring", "mesh"]);
        // The fastest picked: it and the runner-up, so that a pick that passes is
        // measured again as one that misses is.
        let d = deciders(&outcome, 1024, &groups, &["mesh"]);
        assert_eq!(names(&d), vec!["mesh", "rhd"]);
        // A twin names its group; two named picks bring both, and the fastest of the
        // rest.
        let d = deciders(&outcome, 1024, &groups, &["relay-mesh-single", "mesh"]);
        assert_eq!(names(&d), vec!["mesh", "relay-mesh", "rhd"]);
        // No pick: nothing to decide. One group measured: no rival.
        assert!(deciders(&outcome, 1024, &groups, &[]).is_empty());
        assert!(deciders(&outcome, 1024, &groups[..1], &["ring"]).is_empty());
        // A size not measured: nothing.
        assert!(deciders(&outcome, 4096, &groups, &["ring"]).is_empty());
    }
}
