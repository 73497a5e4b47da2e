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
    /// Per stream, one past the iteration's last task (the next iteration's first).
    pub ends: Vec<usize>,
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

    /// Iterations that take a full `per_loop` elements (all but a shorter last one).
    pub fn full(&self) -> usize {
        self.marks
            .iter()
            .take_while(|m| m.count == self.per_loop)
            .count()
    }
}
