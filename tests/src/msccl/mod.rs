//! MSCCL-IR algorithm files for tests (issue 14): generators of correct files for every
//! collective in three shapes (ring, all-pairs, hierarchical), files broken on purpose
//! (each with the keyword the importer's error must contain), and a reference
//! interpreter ([`simulate`]) that proves the generated files compute their collective
//! without the importer.
//!
//! The generators are written from the format's definition (see [`xml`] for the builder
//! and the step types); nothing is taken from msccl-tools or RCCL. Every generator takes
//! [`Params`], so a test can build a file of any size; [`correct_files`] and
//! [`broken_files`] are the catalogue the `msccl_files` binary writes out, and
//! [`checked_in_files`] the few small ones kept under `tests/msccl/`.

pub mod all_pairs;
pub mod broken;
pub mod hierarchical;
pub mod layout;
pub mod ring;
pub mod simulate;
pub mod xml;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The collectives a file can implement.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
    Gather,
    Scatter,
}

impl Coll {
    pub const ALL: [Coll; 8] = [
        Coll::AllReduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllToAll,
        Coll::Broadcast,
        Coll::Reduce,
        Coll::Gather,
        Coll::Scatter,
    ];

    /// The stem of file names: `all_reduce`, `all_gather`, ...
    pub fn stem(self) -> &'static str {
        match self {
            Coll::AllReduce => "all_reduce",
            Coll::AllGather => "all_gather",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::AllToAll => "all_to_all",
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::Gather => "gather",
            Coll::Scatter => "scatter",
        }
    }

    /// The operator as `index.tsv` names it (the RCCL spelling of `coll`).
    pub fn operator(self) -> &'static str {
        self.coll_attr(Dialect::Rccl)
    }

    /// The `coll` attribute in `dialect`: only ReduceScatter is spelled differently.
    pub fn coll_attr(self, dialect: Dialect) -> &'static str {
        match self {
            Coll::AllReduce => "allreduce",
            Coll::AllGather => "allgather",
            Coll::ReduceScatter => match dialect {
                Dialect::Msccl { .. } => "reduce_scatter",
                Dialect::Rccl => "reducescatter",
            },
            Coll::AllToAll => "alltoall",
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::Gather => "gather",
            Coll::Scatter => "scatter",
        }
    }

    /// Reads a `coll` attribute (either dialect).
    pub fn from_attr(text: &str) -> Option<Coll> {
        Some(match text {
            "allreduce" => Coll::AllReduce,
            "allgather" => Coll::AllGather,
            "reducescatter" | "reduce_scatter" => Coll::ReduceScatter,
            "alltoall" => Coll::AllToAll,
            "broadcast" => Coll::Broadcast,
            "reduce" => Coll::Reduce,
            "gather" => Coll::Gather,
            "scatter" => Coll::Scatter,
            _ => return None,
        })
    }

    /// Whether the collective has a root rank.
    pub fn rooted(self) -> bool {
        matches!(
            self,
            Coll::Broadcast | Coll::Reduce | Coll::Gather | Coll::Scatter
        )
    }

    /// Whether the collective combines contributions (so its steps reduce).
    pub fn reduces(self) -> bool {
        matches!(self, Coll::AllReduce | Coll::ReduceScatter | Coll::Reduce)
    }

    /// Chunks of the input buffer with `chunks` = nchunksperloop on `ranks` ranks: one
    /// block for AllGather and Gather, the whole loop otherwise.
    pub fn in_chunks(self, chunks: usize, ranks: usize) -> usize {
        match self {
            Coll::AllGather | Coll::Gather => chunks / ranks,
            _ => chunks,
        }
    }

    /// Chunks of the output buffer: one block for ReduceScatter and Scatter.
    pub fn out_chunks(self, chunks: usize, ranks: usize) -> usize {
        match self {
            Coll::ReduceScatter | Coll::Scatter => chunks / ranks,
            _ => chunks,
        }
    }

    /// Whether nchunksperloop holds one block per rank (so must be a multiple of ngpus).
    pub fn blocked(self) -> bool {
        !matches!(self, Coll::AllReduce | Coll::Broadcast | Coll::Reduce)
    }
}

/// The two dialects of the `<algo>` element.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// microsoft/msccl: `outofplace="1"`, `minBytes`/`maxBytes` (0 = unbounded) and
    /// `coll="reduce_scatter"`.
    Msccl { min_bytes: u64, max_bytes: u64 },
    /// RCCL: only `inplace="0"`, and `coll="reducescatter"`.
    Rccl,
}

impl Dialect {
    /// The msccl dialect without a byte range.
    pub const MSCCL: Dialect = Dialect::Msccl {
        min_bytes: 0,
        max_bytes: 0,
    };
}

/// The `proto` attribute (informational).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Proto {
    Simple,
    Ll,
    Ll128,
}

impl Proto {
    pub fn attr(self) -> &'static str {
        match self {
            Proto::Simple => "Simple",
            Proto::Ll => "LL",
            Proto::Ll128 => "LL128",
        }
    }
}

/// The shapes of algorithm.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Form {
    /// One ring per channel (even channels forward, odd ones backward); rooted
    /// collectives run along the ring from or to the root.
    Ring,
    /// Every rank talks to every other directly, one threadblock per peer.
    AllPairs,
    /// Rings inside and across "nodes" (AllReduce and AllGather only).
    Hierarchical,
}

impl Form {
    pub fn label(self) -> &'static str {
        match self {
            Form::Ring => "ring",
            Form::AllPairs => "all_pairs",
            Form::Hierarchical => "hierarchical",
        }
    }
}

/// What a generator builds.
#[derive(Clone, Debug)]
pub struct Params {
    /// ngpus.
    pub ranks: usize,
    /// nchannels; each channel carries its own share of every block.
    pub channels: usize,
    /// Chunks in one piece (one block's share of one channel, or of one ring).
    pub factor: usize,
    /// Rings: send each piece as `factor` steps of one chunk instead of one step.
    pub pipeline: bool,
    /// Ring AllReduce: two opposite rings on every channel (two threadblocks per channel).
    pub bidirectional: bool,
    /// Hierarchical: the number of nodes (ranks / nodes ranks per node).
    pub nodes: usize,
    /// Rooted collectives: the root.
    pub root: usize,
    pub dialect: Dialect,
    pub proto: Proto,
}

impl Params {
    /// One channel, one chunk a piece, root 0, msccl dialect, Simple.
    pub fn new(ranks: usize) -> Params {
        Params {
            ranks,
            channels: 1,
            factor: 1,
            pipeline: false,
            bidirectional: false,
            nodes: 2,
            root: 0,
            dialect: Dialect::MSCCL,
            proto: Proto::Simple,
        }
    }

    pub fn channels(mut self, channels: usize) -> Params {
        self.channels = channels;
        self
    }

    pub fn factor(mut self, factor: usize) -> Params {
        self.factor = factor;
        self
    }

    pub fn pipeline(mut self, pipeline: bool) -> Params {
        self.pipeline = pipeline;
        self
    }

    pub fn bidirectional(mut self, bidirectional: bool) -> Params {
        self.bidirectional = bidirectional;
        self
    }

    pub fn nodes(mut self, nodes: usize) -> Params {
        self.nodes = nodes;
        self
    }

    pub fn root(mut self, root: usize) -> Params {
        self.root = root;
        self
    }

    pub fn dialect(mut self, dialect: Dialect) -> Params {
        self.dialect = dialect;
        self
    }

    pub fn proto(mut self, proto: Proto) -> Params {
        self.proto = proto;
        self
    }
}

/// The program of `coll` in `form` (None: hierarchical is only for AllReduce and AllGather).
pub fn program(coll: Coll, form: Form, p: &Params) -> Option<xml::Program> {
    Some(match form {
        Form::Ring => match coll {
            Coll::AllReduce => ring::all_reduce_program(p),
            Coll::AllGather => ring::all_gather_program(p),
            Coll::ReduceScatter => ring::reduce_scatter_program(p),
            Coll::AllToAll => ring::all_to_all_program(p),
            Coll::Broadcast => ring::broadcast_program(p),
            Coll::Reduce => ring::reduce_program(p),
            Coll::Gather => ring::gather_program(p),
            Coll::Scatter => ring::scatter_program(p),
        },
        Form::AllPairs => match coll {
            Coll::AllReduce => all_pairs::all_reduce_program(p),
            Coll::AllGather => all_pairs::all_gather_program(p),
            Coll::ReduceScatter => all_pairs::reduce_scatter_program(p),
            Coll::AllToAll => all_pairs::all_to_all_program(p),
            Coll::Broadcast => all_pairs::broadcast_program(p),
            Coll::Reduce => all_pairs::reduce_program(p),
            Coll::Gather => all_pairs::gather_program(p),
            Coll::Scatter => all_pairs::scatter_program(p),
        },
        Form::Hierarchical => match coll {
            Coll::AllReduce => hierarchical::all_reduce_program(p),
            Coll::AllGather => hierarchical::all_gather_program(p),
            _ => return None,
        },
    })
}

/// The XML of `coll` in `form` (None where [`program`] has none).
pub fn generate(coll: Coll, form: Form, p: &Params) -> Option<String> {
    program(coll, form, p).map(|prog| prog.to_xml())
}

/// The 16-rank AllReduce of about 1.4 MB with 24 threadblocks per gpu: twelve channels,
/// each with a forward and a backward ring (one chunk a step).
pub fn big_all_reduce_16() -> String {
    ring::all_reduce(&big_all_reduce_16_params())
}

/// The parameters of [`big_all_reduce_16`].
pub fn big_all_reduce_16_params() -> Params {
    Params::new(16)
        .channels(12)
        .bidirectional(true)
        .factor(1)
        .dialect(Dialect::Msccl {
            min_bytes: 0,
            max_bytes: 0,
        })
}

/// What the importer (and then the analyzer) should say of a file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A correct file: imports, and computes its collective.
    Pass,
    /// The importer rejects it with an error containing this keyword.
    Rejected(&'static str),
    /// Well-formed (the importer accepts it) but wrong: the analyzer, and
    /// [`simulate::check`], reject it with an error containing this keyword.
    Wrong(&'static str),
}

impl Verdict {
    /// The `verdict` column: `pass` or the keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Rejected(k) | Verdict::Wrong(k) => k,
        }
    }

    /// The `stage` column: `-`, `import` or `analyze`.
    pub fn stage(self) -> &'static str {
        match self {
            Verdict::Pass => "-",
            Verdict::Rejected(_) => "import",
            Verdict::Wrong(_) => "analyze",
        }
    }
}

/// One generated file.
#[derive(Clone, Debug)]
pub struct GenFile {
    /// The file name, `<coll>-<form>-<ranks>.xml` or `broken-<what>.xml`/`wrong-<what>.xml`.
    pub name: String,
    pub coll: Coll,
    pub ranks: usize,
    pub root: usize,
    pub nchannels: usize,
    pub xml: String,
    pub verdict: Verdict,
}

/// The parameters the catalogue uses for `coll` in `form` on `ranks` ranks: rings use two
/// channels on 8 ranks, all-pairs two channels (and two chunks a piece) on 4; the rings
/// and hierarchical files are in the msccl dialect, the all-pairs files in RCCL's; rooted
/// collectives have root 3 (ring, 8 ranks) or 5 (all-pairs, 16 ranks), else 0.
pub fn catalogue_params(coll: Coll, form: Form, ranks: usize) -> Params {
    let mut p = Params::new(ranks);
    match form {
        Form::Ring => {
            p = p.channels(if ranks == 8 { 2 } else { 1 });
            if coll.rooted() && ranks == 8 {
                p = p.root(3);
            }
            if ranks == 16 {
                p = p.proto(Proto::Ll);
            }
        }
        Form::AllPairs => {
            p = p
                .channels(if ranks == 4 { 2 } else { 1 })
                .factor(if ranks == 4 { 2 } else { 1 })
                .dialect(Dialect::Rccl);
            if coll.rooted() && ranks == 16 {
                p = p.root(5);
            }
        }
        Form::Hierarchical => {
            p = p
                .nodes(if ranks == 16 { 4 } else { 2 })
                .channels(if ranks == 8 { 2 } else { 1 })
                .proto(Proto::Ll128)
                .dialect(Dialect::Msccl {
                    min_bytes: 0,
                    max_bytes: 1 << 30,
                });
        }
    }
    p
}

/// Every correct file of the catalogue: each collective as a ring and all-pairs on 4, 8
/// and 16 ranks, AllReduce and AllGather also hierarchical. The big file is separate
/// ([`big_file`]).
pub fn correct_files() -> Vec<GenFile> {
    let mut files = Vec::new();
    for coll in Coll::ALL {
        for form in [Form::Ring, Form::AllPairs, Form::Hierarchical] {
            for ranks in [4, 8, 16] {
                let p = catalogue_params(coll, form, ranks);
                let Some(prog) = program(coll, form, &p) else {
                    continue;
                };
                files.push(GenFile {
                    name: format!("{}.xml", prog.name),
                    coll,
                    ranks,
                    root: if coll.rooted() { p.root } else { 0 },
                    nchannels: p.channels,
                    xml: prog.to_xml(),
                    verdict: Verdict::Pass,
                });
            }
        }
    }
    files
}

/// [`big_all_reduce_16`] as a catalogue entry.
pub fn big_file() -> GenFile {
    let p = big_all_reduce_16_params();
    GenFile {
        name: format!("{}.xml", ring::all_reduce_program(&p).name),
        coll: Coll::AllReduce,
        ranks: 16,
        root: 0,
        nchannels: p.channels,
        xml: big_all_reduce_16(),
        verdict: Verdict::Pass,
    }
}

/// Every broken file: the eight the importer must reject, then the three well-formed but
/// wrong ones only the analyzer (or [`simulate::check`]) catches.
pub fn broken_files() -> Vec<GenFile> {
    broken::all()
        .into_iter()
        .map(|b| GenFile {
            name: b.name.to_string(),
            coll: b.coll,
            ranks: b.ranks,
            root: 0,
            nchannels: b.nchannels,
            xml: b.xml,
            verdict: b.verdict,
        })
        .collect()
}

/// The names of the correct files kept under `tests/msccl/` (with every broken file).
pub const CHECKED_IN_CORRECT: [&str; 2] = ["all_reduce-ring-4.xml", "all_gather-all_pairs-4.xml"];

/// The files kept under `tests/msccl/`: [`CHECKED_IN_CORRECT`] and every broken file.
pub fn checked_in_files() -> Vec<GenFile> {
    let mut files: Vec<GenFile> = correct_files()
        .into_iter()
        .filter(|f| CHECKED_IN_CORRECT.contains(&f.name.as_str()))
        .collect();
    files.extend(broken_files());
    files
}

/// The step types a file's text names (`type="..."`), sorted; read from the text so that
/// it works on malformed files too.
pub fn step_types(xml: &str) -> BTreeSet<String> {
    let mut types = BTreeSet::new();
    let mut rest = xml;
    while let Some(at) = rest.find(" type=\"") {
        rest = &rest[at + 7..];
        if let Some(end) = rest.find('"') {
            types.insert(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    types
}

/// Threadblocks of the gpu with the most, counted in the text (0 for malformed files).
fn max_tbs(xml: &str) -> usize {
    xml.split("<gpu ")
        .skip(1)
        .map(|gpu| gpu.matches("<tb ").count())
        .max()
        .unwrap_or(0)
}

/// The header of `index.tsv`.
pub const INDEX_HEADER: &str =
    "file\toperator\tranks\tstep_types\tverdict\tstage\troot\tnchannels\ttbs_per_gpu\tbytes";

/// `index.tsv` for `files`: a header line, then one line a file with the columns of
/// [`INDEX_HEADER`]: the file name, the operator (`allreduce`, ...), ngpus, the step types
/// used (comma separated), the verdict (`pass` or the keyword the error must contain), the
/// stage that must catch it (`-`, `import` or `analyze`), the root (0 for collectives
/// without one), nchannels, the most threadblocks on one gpu, and the file's size.
pub fn index_tsv(files: &[GenFile]) -> String {
    let mut out = String::new();
    writeln!(out, "{INDEX_HEADER}").unwrap();
    for f in files {
        let types: Vec<String> = step_types(&f.xml).into_iter().collect();
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            f.name,
            f.coll.operator(),
            f.ranks,
            types.join(","),
            f.verdict.keyword(),
            f.verdict.stage(),
            f.root,
            f.nchannels,
            max_tbs(&f.xml),
            f.xml.len()
        )
        .unwrap();
    }
    out
}
