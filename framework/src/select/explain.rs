//! Why `select_alg` chose what it chose: the source of the decision and a verdict for every
//! candidate, for logs, `oxccl check --explain` and tests.

use crate::op::OpKind;
use std::fmt;

/// Which link of the selection chain decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// `OXCCL_ALGO` (or `Config::algo`) forced the executor.
    Override,
    /// A plugin selector of this name answered.
    PluginSelector(&'static str),
    /// The tuning table had a measurement for the request's size bucket.
    TuningTable {
        /// The measured time of the pick, microseconds.
        time_us: f64,
        /// The measured size the pick comes from, bytes per rank.
        measured_bytes: usize,
    },
    /// The cost model: the least modelled time.
    Model,
    /// The declared preference: used where the model cannot decide (zero bytes, or
    /// layouts that differ per rank).
    Preference,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Override => f.write_str("OXCCL_ALGO override"),
            Source::PluginSelector(name) => write!(f, "plugin selector `{name}`"),
            Source::TuningTable {
                time_us,
                measured_bytes,
            } => write!(
                f,
                "tuning table ({time_us:.2} us measured at {measured_bytes} B)"
            ),
            Source::Model => f.write_str("cost model"),
            Source::Preference => f.write_str("declared preference"),
        }
    }
}

/// How a candidate's time was modelled.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Estimate {
    /// Every rank's program replayed by the discrete-event model.
    Simulated,
    /// The analytic α-β estimate from the representative ranks' programs (the ranks are
    /// in [`Explanation::sampled_ranks`]): the replay would have passed its budget.
    Analytic,
}

/// A candidate's modelled figures at the selection's representative size.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Modelled {
    /// Modelled time of the operation, microseconds.
    pub time_us: f64,
    /// nccl-tests algorithm bandwidth at that time, GB/s.
    pub algbw_gbps: f64,
    /// Which model gave the time.
    pub estimate: Estimate,
}

impl fmt::Display for Modelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.2} us, algbw {:.3} GB/s",
            self.time_us, self.algbw_gbps
        )?;
        match self.estimate {
            Estimate::Simulated => Ok(()),
            Estimate::Analytic => f.write_str(", analytic"),
        }
    }
}

/// Why a candidate was not considered.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Its declared hard constraints fail (rank count, full mesh).
    Constraint,
    /// It needs a link that is broken or missing, or cannot plan a rank.
    Infeasible,
    /// A size or server-count hint excludes it (preference fallback only).
    SizeHint,
    /// Recording its programs or modelling them failed.
    ModelError,
}

impl Rejection {
    /// A short label for tables.
    pub const fn label(self) -> &'static str {
        match self {
            Rejection::Constraint => "constraint",
            Rejection::Infeasible => "infeasible",
            Rejection::SizeHint => "size hint",
            Rejection::ModelError => "model error",
        }
    }
}

/// What became of one candidate.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Selected; with its modelled figures when the model ran.
    Chosen { modelled: Option<Modelled> },
    /// Applicable but another executor won, for the reason given.
    NotChosen {
        modelled: Option<Modelled>,
        why: String,
    },
    /// Not applicable.
    Rejected { kind: Rejection, reason: String },
}

impl Verdict {
    /// The modelled figures, if the model ran for this candidate.
    pub fn modelled(&self) -> Option<Modelled> {
        match self {
            Verdict::Chosen { modelled } | Verdict::NotChosen { modelled, .. } => *modelled,
            Verdict::Rejected { .. } => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Chosen { modelled: Some(m) } => write!(f, "chosen: {m}"),
            Verdict::Chosen { modelled: None } => f.write_str("chosen"),
            Verdict::NotChosen {
                modelled: Some(m),
                why,
            } => write!(f, "{why}: {m}"),
            Verdict::NotChosen {
                modelled: None,
                why,
            } => f.write_str(why),
            Verdict::Rejected { kind, reason } => {
                write!(f, "rejected ({}): {reason}", kind.label())
            }
        }
    }
}

/// One candidate's line of an explanation.
#[derive(Clone, Debug, PartialEq)]
pub struct CandidateReport {
    pub name: &'static str,
    pub preference: i32,
    pub verdict: Verdict,
}

/// Why an executor was selected.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    pub source: Source,
    pub op: OpKind,
    /// The size the built-in choice was made for, bytes per rank (the request's size
    /// bucket); `None` for overrides and plugin selectors.
    pub bucket_bytes: Option<usize>,
    /// Why the model did not run, when the built-in choice fell back to preference.
    pub note: Option<String>,
    /// Every executor of the operator that was considered, sorted by name.
    pub candidates: Vec<CandidateReport>,
    /// The ranks whose programs the analytic estimates were made from, when a candidate
    /// was estimated rather than simulated ([`Estimate::Analytic`]); `None` when every
    /// modelled candidate was simulated.
    pub sampled_ranks: Option<Vec<oxccl_platform::Rank>>,
}

impl Explanation {
    /// The chosen candidate's report.
    pub fn chosen(&self) -> Option<&CandidateReport> {
        self.candidates
            .iter()
            .find(|c| matches!(c.verdict, Verdict::Chosen { .. }))
    }

    /// The candidates rejected, with their rejection.
    pub fn rejected(&self) -> impl Iterator<Item = (&CandidateReport, Rejection)> {
        self.candidates.iter().filter_map(|c| match c.verdict {
            Verdict::Rejected { kind, .. } => Some((c, kind)),
            _ => None,
        })
    }

    /// The same candidates with `chosen` selected by `source` instead (a tuning table
    /// overruling the model): the others that could run lost to it.
    pub fn retold(&self, chosen: &str, source: Source) -> Explanation {
        let verdict = |c: &CandidateReport| match &c.verdict {
            Verdict::Rejected { .. } => c.verdict.clone(),
            v if c.name == chosen => Verdict::Chosen {
                modelled: v.modelled(),
            },
            v => Verdict::NotChosen {
                modelled: v.modelled(),
                why: format!("{source} prefers {chosen}"),
            },
        };
        Explanation {
            candidates: self
                .candidates
                .iter()
                .map(|c| CandidateReport {
                    verdict: verdict(c),
                    ..c.clone()
                })
                .collect(),
            source,
            ..self.clone()
        }
    }

    /// Which estimate decided: every candidate simulated, or which were estimated
    /// analytically from which ranks.
    pub fn estimates(&self) -> String {
        let analytic: Vec<&str> = self
            .candidates
            .iter()
            .filter(|c| {
                c.verdict
                    .modelled()
                    .is_some_and(|m| m.estimate == Estimate::Analytic)
            })
            .map(|c| c.name)
            .collect();
        let chosen = self.chosen().and_then(|c| c.verdict.modelled());
        let decided = match chosen.map(|m| m.estimate) {
            Some(Estimate::Simulated) => "decided by the discrete-event simulation of every rank",
            Some(Estimate::Analytic) => "decided by the analytic alpha-beta estimate",
            None => "no modelled time decided",
        };
        match (&self.sampled_ranks, analytic.is_empty()) {
            (Some(ranks), false) => format!(
                "estimates: {decided} from the programs of ranks {ranks:?} (a candidate's \
                 replay of every rank would pass the simulation budget); analytic: {}",
                analytic.join(", ")
            ),
            _ => format!("estimates: {decided}"),
        }
    }

    /// One line for logs: `mesh=12.30us* ring=20.10us one-shot=size hint ...` (`*` marks
    /// the choice).
    pub fn compact(&self) -> String {
        let item = |c: &CandidateReport| {
            let mark = if matches!(c.verdict, Verdict::Chosen { .. }) {
                "*"
            } else {
                ""
            };
            match &c.verdict {
                Verdict::Rejected { kind, .. } => format!("{}={}", c.name, kind.label()),
                v => match v.modelled() {
                    Some(m) => format!("{}={:.2}us{mark}", c.name, m.time_us),
                    None => format!("{}=ok{mark}", c.name),
                },
            }
        };
        self.candidates
            .iter()
            .map(item)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The candidate table, one line per candidate, each line starting with `indent`.
    pub fn table(&self, indent: &str) -> String {
        let mut out = format!("{indent}selected by the {}", self.source);
        if let Some(bytes) = self.bucket_bytes {
            out.push_str(&format!(", decided for {bytes} B per rank"));
        }
        if let Some(note) = &self.note {
            out.push_str(&format!(" ({note})"));
        }
        out.push('\n');
        out.push_str(&format!("{indent}{}\n", self.estimates()));
        for c in &self.candidates {
            out.push_str(&format!(
                "{indent}{:<18} {:>5}  {}\n",
                c.name, c.preference, c.verdict
            ));
        }
        out
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table(""))
    }
}
