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
    let holds_pick = |g: &Twins| {
        pick.is_some_and(|p| g.measured.name == p || g.twins.iter().any(|t| t.name == p))
    };
    groups
        .iter()
        .zip(&times)
        .filter(|(g, t)| t.is_some_and(|t| t <= fastest * CONTENDER_RATIO || holds_pick(g)))
        .map(|(g, _)| g.measured)
        .collect()
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

    #[test]
    fn contenders_are_the_executors_near_the_fastest_and_the_picks_group() {
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
        let mut outcome = Outcome {
            points: vec![
                point(1024, "ring", 20.0),
                point(1024, "mesh", 10.0),
                point(1024, "relay-mesh", 30.0),
                point(1024, "rhd", 12.5),
                point(1024, "nb", 12.6),
            ],
            ..Outcome::default()
        };
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
}
