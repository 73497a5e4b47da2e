//! Where each iteration of the orchestration loop lies in a rank's program.
//!
//! The planner appends one iteration after another to every stream ([`super::plan_program`]),
//! so an iteration is, on each stream, the tasks between the previous iteration's end and
//! its own. The marks cost one small vector per iteration; they let the analyzer recognise
//! a long loop whose iterations repeat, and prove a window of them for all (see
//! `crate::analyzer` and its `fold` pass), and let selection's estimate weigh iterations
//! without planning every one.

/// One iteration of the loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopMark {
    /// The iteration's first element within the whole operation.
    pub first: usize,
    /// Elements the iteration takes.
    pub count: usize,
    /// Iterations this one stands for: 1, or in a sampled plan ([`Iterations::Sampled`])
    /// the second iteration stands for itself and every one left out.
    pub repeats: usize,
    /// Per stream, one past the iteration's last task (the next iteration's first).
    pub ends: Vec<usize>,
}

/// Which iterations the planner builds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Iterations {
    /// Every one: what runs, and what the analyzer proves.
    All,
    /// The first, the second and the last, the second standing for every one between:
    /// what selection's analytic estimate needs from a long loop whose iterations
    /// repeat, at a fraction of the planning (a 1 GiB AllReduce through 32 MiB CCL
    /// buffers plans 3 of its 32 iterations). Only for estimates: a program planned so
    /// is never run or proved.
    Sampled,
}

impl Iterations {
    /// Whether iteration `i` of `total` is planned, and how many it stands for.
    pub fn repeats(self, i: usize, total: usize) -> Option<usize> {
        match self {
            Iterations::All => Some(1),
            Iterations::Sampled if i == 1 && total > 3 => Some(total - 2),
            Iterations::Sampled if i < 2 || i + 1 == total => Some(1),
            Iterations::Sampled => None,
        }
    }
}

/// Every iteration of one rank's program, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Loops {
    /// Elements per full iteration (the loop's step); 0 for a program not built by the
    /// loop (a hand-made one in a test), which has no marks.
    pub per_loop: usize,
    pub marks: Vec<LoopMark>,
}

impl Loops {
    /// The task range of iteration `i` on `stream`.
    pub fn tasks(&self, i: usize, stream: usize) -> std::ops::Range<usize> {
        let start = match i {
            0 => 0,
            _ => self.marks[i - 1].ends[stream],
        };
        start..self.marks[i].ends[stream]
    }

    /// The tasks of a program with every iteration planned: each planned iteration's
    /// tasks times the iterations it stands for (the program's own count when all are).
    pub fn foretold_tasks(&self) -> usize {
        (0..self.marks.len())
            .map(|i| {
                let tasks: usize = (0..self.marks[i].ends.len())
                    .map(|s| self.tasks(i, s).len())
                    .sum();
                tasks.saturating_mul(self.marks[i].repeats)
            })
            .fold(0, usize::saturating_add)
    }

    /// Iterations that take a full `per_loop` elements (all but a shorter last one).
    pub fn full(&self) -> usize {
        self.marks
            .iter()
            .take_while(|m| m.count == self.per_loop)
            .count()
    }
}
