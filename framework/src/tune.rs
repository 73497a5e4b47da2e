//! Tuning tables: measured executor times that `select_alg` prefers over the cost model.
//!
//! `oxccl tune` runs every feasible executor of an operator over a size sweep on the real
//! device and writes what it measured; `OXCCL_TUNE_FILE` loads such a table into
//! [`crate::Config::tune`], and `select_alg` asks [`TuneTable::pick`] which executor to run.
//!
//! # The file format
//!
//! A line-oriented text file, chosen over TOML because a table is thousands of uniform
//! rows that people read, diff and `sort` as columns, and because every error then has a
//! line number:
//!
//! ```text
//! oxccl-tune 1
//! # operator   ranks  dtype  bytes     executor   time_us  topology
//! all_reduce   8      float  1024      one-shot   11.52    [8]
//! all_reduce   8      float  1024      mesh       19.07    [8]
//! all_reduce   8      float  1048576   ring       402.9    [8] broken 0-1
//! ```
//!
//! - The first line that is neither blank nor a comment is the header `oxccl-tune 1`
//!   (format version 1); a newer version is refused rather than misread.
//! - `#` starts a comment line; blank lines are ignored.
//! - Every other line is one measurement, fields separated by whitespace: the operator
//!   (any spelling `OpKind` parses: `all_reduce`, `all-reduce`, `AllReduce`), the rank
//!   count, the data type (`float`, `f32`, `bfloat16`...), the bytes of one rank's input
//!   (`SelectRequest::bytes`, which for the gathering operators is one block, not the
//!   nccl-tests "size"), the executor's name, the mean time per call in microseconds, and
//!   last, running to the end of the line, the topology as
//!   [`crate::Topology::describe`] writes it (`[8]`, `[8,8] put inter`, `[8] broken 0-1`).
//! - A measurement may appear once: a second line with the same operator, ranks,
//!   topology, data type, bytes and executor is an error naming both lines.
//! - A line that could never match a lookup is an error, not dead weight: ranks outside
//!   `1..=`[`MAX_RANKS`], bytes past [`MAX_BUFFER_BYTES`], a topology whose rank total is
//!   not the line's rank count, or one not written exactly as `describe` writes it (the
//!   error shows the text to write).
//!
//! [`TuneTable::to_text`] writes this format with aligned columns and
//! [`TuneTable::parse`] reads it back to an equal table.
//!
//! # The pick rule
//!
//! Sizes are grouped in power-of-two buckets: `bytes` falls in the bucket
//! `bytes.next_power_of_two()`, i.e. `(2^(k-1), 2^k]` (0 and 1 share the bucket 1). For a
//! request, [`TuneTable::pick`] keeps the measurements of the same operator, ranks,
//! topology and data type whose executor is among the candidates (executors measured but
//! no longer registered, or infeasible here, are ignored) and whose size is in the
//! request's bucket; among those it takes the measured size nearest to the request (the
//! smaller on a tie), and at that size the fastest executor (by name on a tie). With no
//! such measurement it answers `None` and the model decides: a measurement says nothing
//! about sizes a factor of two or more away, where a different algorithm may win.

use crate::error::Cause;
use crate::limits::{MAX_BUFFER_BYTES, MAX_RANKS};
use crate::op::OpKind;
use crate::topology::{describe_parts, PutScope};
use oxccl_platform::dtype::ParseNameError;
use oxccl_platform::DataType;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The header line of a version-1 table.
const HEADER: &str = "oxccl-tune 1";

/// One measurement: `executor` ran `op` on `ranks` ranks of topology `topology`
/// ([`crate::Topology::describe`]) with `bytes` per rank of `dtype` in `time_us`.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneEntry {
    pub op: OpKind,
    pub ranks: usize,
    pub topology: String,
    pub dtype: DataType,
    pub bytes: usize,
    pub executor: String,
    pub time_us: f64,
}

/// What a lookup asks for.
#[derive(Clone, Debug)]
pub struct TuneKey<'a> {
    pub op: OpKind,
    pub ranks: usize,
    /// [`crate::Topology::describe`] of the communicator's topology.
    pub topology: &'a str,
    pub dtype: DataType,
    /// Bytes per rank of the operation's input (as `SelectRequest::bytes`).
    pub bytes: usize,
}

/// The measured choice for a key.
#[derive(Clone, Debug, PartialEq)]
pub struct TunedPick {
    pub executor: String,
    pub time_us: f64,
    /// The measured size the pick comes from.
    pub measured_bytes: usize,
}

/// A loaded tuning table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TuneTable {
    pub entries: Vec<TuneEntry>,
}

/// A table that cannot be read or parsed: where (file, line) and what was wrong.
#[derive(Clone, Debug)]
pub struct TuneError {
    /// The file, when the table came from one.
    pub path: Option<PathBuf>,
    /// 1-based line number, when the error is about one line.
    pub line: Option<usize>,
    /// What is wrong and what to do.
    pub reason: String,
    /// The error behind this one (the file's `io::Error`, a name that does not parse).
    pub source: Option<Cause>,
}

impl std::error::Error for TuneError {
    /// The cause itself (not the `Arc` that shares it), so that it downcasts to its type.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let cause: &(dyn std::error::Error + Send + Sync + 'static) = self.source.as_deref()?;
        Some(cause)
    }
}

/// What is wrong with one line: a description, and the error behind it when there is one.
struct LineFault {
    reason: String,
    source: Option<Cause>,
}

impl LineFault {
    fn caused(reason: String, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        LineFault {
            reason,
            source: Some(Arc::new(source)),
        }
    }
}

impl From<String> for LineFault {
    fn from(reason: String) -> Self {
        LineFault {
            reason,
            source: None,
        }
    }
}

impl fmt::Display for TuneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut place = Vec::new();
        if let Some(path) = &self.path {
            place.push(path.display().to_string());
        }
        if let Some(line) = self.line {
            place.push(format!("line {line}"));
        }
        if place.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", place.join(", "), self.reason)
        }
    }
}

fn line_error(line: usize, fault: impl Into<LineFault>) -> TuneError {
    let fault = fault.into();
    TuneError {
        path: None,
        line: Some(line),
        reason: fault.reason,
        source: fault.source,
    }
}

/// The power-of-two bucket of a size (see the module doc).
pub fn size_bucket(bytes: usize) -> usize {
    bytes.next_power_of_two()
}

impl TuneEntry {
    /// True when this measurement is about `key`'s operator, ranks, topology and dtype.
    fn matches(&self, key: &TuneKey<'_>) -> bool {
        self.op == key.op
            && self.ranks == key.ranks
            && self.dtype == key.dtype
            && self.topology == key.topology
    }

    /// What one tuning run's series shares: operator, ranks, topology and dtype.
    fn series(&self) -> (OpKind, usize, &str, DataType) {
        (self.op, self.ranks, &self.topology, self.dtype)
    }

    /// What a measurement is of (two entries with the same one may differ only in time).
    fn measurement(&self) -> ((OpKind, usize, &str, DataType), usize, &str) {
        (self.series(), self.bytes, &self.executor)
    }
}

impl TuneTable {
    /// The fastest measured executor among `candidates` for `key`, from the measurements
    /// of the size bucket `key.bytes` falls in; `None` when the table has none.
    pub fn pick(&self, key: &TuneKey<'_>, candidates: &[&str]) -> Option<TunedPick> {
        let bucket = size_bucket(key.bytes);
        let usable: Vec<&TuneEntry> = self
            .entries
            .iter()
            .filter(|e| e.matches(key) && size_bucket(e.bytes) == bucket)
            .filter(|e| candidates.contains(&e.executor.as_str()))
            .collect();
        let nearest = usable
            .iter()
            .map(|e| e.bytes)
            .min_by_key(|&b| (b.abs_diff(key.bytes), b))?;
        usable
            .into_iter()
            .filter(|e| e.bytes == nearest)
            .min_by(|a, b| {
                a.time_us
                    .total_cmp(&b.time_us)
                    .then_with(|| a.executor.cmp(&b.executor))
            })
            .map(|e| TunedPick {
                executor: e.executor.clone(),
                time_us: e.time_us,
                measured_bytes: e.bytes,
            })
    }

    /// Add `fresh` measurements, dropping the old ones of every operator, ranks, topology
    /// and dtype that `fresh` measured (a re-run of `oxccl tune` replaces what it
    /// re-measured and keeps the rest).
    pub fn merge(&mut self, fresh: TuneTable) {
        let measured: HashSet<_> = fresh.entries.iter().map(TuneEntry::series).collect();
        self.entries.retain(|old| !measured.contains(&old.series()));
        self.entries.extend(fresh.entries);
    }

    /// Parse a table in the format of the module doc.
    pub fn parse(text: &str) -> Result<Self, TuneError> {
        let mut table = TuneTable::default();
        let mut lines = Vec::new();
        let mut header_seen = false;
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let content = raw.trim();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            if !header_seen {
                check_header(content).map_err(|reason| line_error(line, reason))?;
                header_seen = true;
                continue;
            }
            let entry = parse_entry(content).map_err(|reason| line_error(line, reason))?;
            table.entries.push(entry);
            lines.push(line);
        }
        if !header_seen {
            return Err(TuneError {
                path: None,
                line: None,
                reason: format!(
                    "no `{HEADER}` header: this is not a tuning table (write one with `oxccl tune`)"
                ),
                source: None,
            });
        }
        check_no_repeats(&table.entries, &lines)?;
        Ok(table)
    }

    /// Read and parse the table at `path`; errors name the path.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TuneError> {
        let path = path.as_ref();
        let text =
            crate::limits::read_bounded(path, MAX_TUNE_FILE_BYTES).map_err(|e| TuneError {
                path: Some(path.to_path_buf()),
                line: None,
                reason: "cannot read the file".into(),
                source: Some(Arc::new(e)),
            })?;
        Self::parse(&text).map_err(|e| TuneError {
            path: Some(path.to_path_buf()),
            ..e
        })
    }

    /// The table in the format of the module doc; [`TuneTable::parse`] reads it back equal.
    pub fn to_text(&self) -> String {
        let rows: Vec<[String; 7]> = self
            .entries
            .iter()
            .map(|e| {
                [
                    e.op.name().to_string(),
                    e.ranks.to_string(),
                    e.dtype.name().to_string(),
                    e.bytes.to_string(),
                    e.executor.clone(),
                    // Rust's float Display is the shortest text that reads back equal.
                    e.time_us.to_string(),
                    e.topology.clone(),
                ]
            })
            .collect();
        let titles = [
            "# operator",
            "ranks",
            "dtype",
            "bytes",
            "executor",
            "time_us",
            "topology",
        ];
        let mut widths = titles.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut out = format!("{HEADER}\n");
        out.push_str(&aligned(&titles.map(String::from), &widths));
        for row in &rows {
            out.push_str(&aligned(row, &widths));
        }
        out
    }
}

/// Largest tuning table read (millions of measurements); anything larger (`/dev/zero`) is
/// refused instead of read without end.
pub const MAX_TUNE_FILE_BYTES: usize = 256 << 20;

/// One line of cells padded to `widths` (the last cell unpadded).
fn aligned(cells: &[String; 7], widths: &[usize; 7]) -> String {
    let mut line = String::new();
    for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
        if i + 1 == cells.len() {
            line.push_str(cell);
        } else {
            line.push_str(&format!("{cell:<w$}  "));
        }
    }
    line.push('\n');
    line
}

/// An error at the second line of the first measurement that appears twice (`lines[i]`
/// is the line of `entries[i]`); one pass over a hash map, so large tables load in linear
/// time.
fn check_no_repeats(entries: &[TuneEntry], lines: &[usize]) -> Result<(), TuneError> {
    let mut first_line = HashMap::with_capacity(entries.len());
    for (entry, &line) in entries.iter().zip(lines) {
        if let Some(earlier) = first_line.insert(entry.measurement(), line) {
            let reason = format!(
                "repeats the measurement of line {earlier} (same operator, ranks, topology, \
                 dtype, bytes and executor); keep one of the two"
            );
            return Err(line_error(line, reason));
        }
    }
    Ok(())
}

fn check_header(content: &str) -> Result<(), String> {
    let mut words = content.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("oxccl-tune"), Some("1"), None) => Ok(()),
        (Some("oxccl-tune"), Some(version), None) => Err(format!(
            "tuning table version {version} is not supported (this oxccl reads version 1); \
             re-run `oxccl tune`"
        )),
        _ => Err(format!(
            "expected the header `{HEADER}`, found `{content}`; a tuning table starts with it"
        )),
    }
}

/// One measurement line: `op ranks dtype bytes executor time_us topology...`.
fn parse_entry(content: &str) -> Result<TuneEntry, LineFault> {
    let mut rest = content;
    let mut field = |what: &str| -> Result<&str, String> {
        let trimmed = rest.trim_start();
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        let (word, tail) = trimmed.split_at(end);
        rest = tail;
        if word.is_empty() {
            Err(format!(
                "missing {what}; a measurement is `operator ranks dtype bytes executor \
                 time_us topology`"
            ))
        } else {
            Ok(word)
        }
    };
    let op_word = field("the operator")?;
    let op: OpKind = op_word.parse().map_err(|e: crate::Error| {
        LineFault::caused(format!("`{op_word}` is not an operator"), e)
    })?;
    let ranks = parse_count(field("the rank count")?, "rank count")?;
    if ranks == 0 || ranks > MAX_RANKS {
        return Err(format!(
            "rank count {ranks} can never match: a communicator has at least one rank and at \
             most {MAX_RANKS} (limits::MAX_RANKS)"
        )
        .into());
    }
    let dtype_word = field("the data type")?;
    let dtype: DataType = dtype_word.parse().map_err(|e: ParseNameError| {
        LineFault::caused(format!("`{dtype_word}` is not a data type"), e)
    })?;
    let bytes = parse_count(field("the bytes per rank")?, "bytes per rank")?;
    if bytes > MAX_BUFFER_BYTES {
        return Err(format!(
            "bytes per rank {bytes} can never match: a rank's buffer holds at most \
             {MAX_BUFFER_BYTES} bytes (limits::MAX_BUFFER_BYTES)"
        )
        .into());
    }
    let executor = field("the executor")?.to_string();
    let time_us = parse_time(field("the time in µs")?)?;
    let topology = rest.trim();
    check_topology(topology, ranks)?;
    Ok(TuneEntry {
        op,
        ranks,
        topology: topology.to_string(),
        dtype,
        bytes,
        executor,
        time_us,
    })
}

/// `topology` must be what [`crate::Topology::describe`] writes for a topology of `ranks`
/// ranks (lookups compare the text), else the entry could never match.
fn check_topology(topology: &str, ranks: usize) -> Result<(), String> {
    let malformed = || {
        format!(
            "missing or malformed topology `{topology}`: expected what Topology::describe \
             writes, e.g. `[8]`, `[8,8] put inter` or `[8] broken 0-1,2-3`"
        )
    };
    let (servers, broken, put) = parse_described(topology).ok_or_else(malformed)?;
    let total = servers
        .iter()
        .try_fold(0usize, |sum, &s| sum.checked_add(s))
        .ok_or_else(malformed)?;
    if total != ranks {
        return Err(format!(
            "topology `{topology}` has {total} ranks but the line says {ranks}: it can never \
             match; fix the rank count or the topology"
        ));
    }
    if let Some(&(a, b)) = broken.iter().find(|&&(a, b)| a >= b || b >= total) {
        return Err(format!(
            "broken link {a}-{b} in `{topology}` can never exist: write each link low-high, \
             with ranks below {total}"
        ));
    }
    let canonical = describe_parts(&servers, &broken.into_iter().collect(), put);
    if canonical != topology {
        return Err(format!(
            "topology `{topology}` is not written as Topology::describe writes it and would \
             never match; write `{canonical}`"
        ));
    }
    Ok(())
}

/// A broken link as `describe` writes it, `(low, high)`.
type BrokenPair = (usize, usize);

/// The server sizes, broken pairs and put-only scope of a `describe` text, or `None` when
/// it is not one.
fn parse_described(text: &str) -> Option<(Vec<usize>, Vec<BrokenPair>, PutScope)> {
    let (sizes, tail) = text.strip_prefix('[')?.split_once(']')?;
    let servers = sizes
        .split(',')
        .map(|s| s.trim().parse().ok().filter(|&n: &usize| n > 0))
        .collect::<Option<Vec<usize>>>()?;
    let (tail, put) = match tail.rsplit_once(" put ") {
        Some((head, word)) => (head, PutScope::from_word(word.trim())?),
        None => (tail, PutScope::None),
    };
    let tail = tail.trim();
    if tail.is_empty() {
        return Some((servers, vec![], put));
    }
    let pairs = tail.strip_prefix("broken")?;
    let broken = pairs
        .split(',')
        .map(|pair| {
            let (a, b) = pair.trim().split_once('-')?;
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        })
        .collect::<Option<Vec<BrokenPair>>>()?;
    Some((servers, broken, put))
}

fn parse_count(word: &str, what: &str) -> Result<usize, String> {
    word.parse()
        .map_err(|_| format!("{what} `{word}` is not a whole number"))
}

fn parse_time(word: &str) -> Result<f64, String> {
    match word.parse::<f64>() {
        Ok(t) if t.is_finite() && t > 0.0 => Ok(t),
        _ => Err(format!(
            "time `{word}` must be a positive number of microseconds"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(bytes: usize, executor: &str, time_us: f64) -> TuneEntry {
        TuneEntry {
            op: OpKind::AllReduce,
            ranks: 8,
            topology: "[8]".into(),
            dtype: DataType::F32,
            bytes,
            executor: executor.into(),
            time_us,
        }
    }

    fn key(bytes: usize) -> TuneKey<'static> {
        TuneKey {
            op: OpKind::AllReduce,
            ranks: 8,
            topology: "[8]",
            dtype: DataType::F32,
            bytes,
        }
    }

    const ALL: &[&str] = &["one-shot", "mesh", "ring", "rhd"];

    #[test]
    fn round_trips() {
        let mut broken = entry(1 << 20, "ring", 402.93);
        broken.topology = "[8] broken 0-1,2-3".into();
        let mut gather = entry(4096, "mesh", 0.1 + 0.2);
        gather.op = OpKind::AllGather;
        gather.dtype = DataType::Bf16;
        let mut tcp = entry(1024, "ring", 90.0);
        tcp.topology = "[1,1,1,1,1,1,1,1] put all".into();
        let table = TuneTable {
            entries: vec![entry(1024, "one-shot", 11.5), broken, gather, tcp],
        };
        let text = table.to_text();
        assert!(text.starts_with("oxccl-tune 1\n"), "{text}");
        assert_eq!(TuneTable::parse(&text).unwrap(), table);
    }

    #[test]
    fn reads_comments_spellings_and_topologies_with_spaces() {
        let text = "\n# written by hand\noxccl-tune 1\n\n  AllReduce 8 f32 2048 ring 30 [8] broken 0-1  \n# end\n";
        let table = TuneTable::parse(text).unwrap();
        let mut want = entry(2048, "ring", 30.0);
        want.topology = "[8] broken 0-1".into();
        assert_eq!(table.entries, vec![want]);
    }

    #[test]
    fn bad_lines_name_the_line_and_the_problem() {
        let cases = [
            ("all_reduce 8 float 1024 ring 3 [8]", 1, "header"),
            ("oxccl-tune 2", 1, "version 2"),
            ("oxccl-tune 1\nallsum 8 float 1024 ring 3 [8]", 2, "allsum"),
            ("oxccl-tune 1\n\nall_reduce x float 1024 ring 3 [8]", 3, "rank count"),
            ("oxccl-tune 1\nall_reduce 0 float 1024 ring 3 [8]", 2, "at least one"),
            ("oxccl-tune 1\nall_reduce 8 quad 1024 ring 3 [8]", 2, "quad"),
            ("oxccl-tune 1\nall_reduce 8 float 1K ring 3 [8]", 2, "1K"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring -3 [8]", 2, "positive"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring NaN [8]", 2, "positive"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring 3", 2, "topology"),
            ("oxccl-tune 1\nall_reduce 4097 float 1024 ring 3 [4097]", 2, "at most 4096"),
            ("oxccl-tune 1\nall_reduce 8 float 1099511627777 ring 3 [8]", 2, "never match"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring 3 [4]", 2, "has 4 ranks"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring 3 [8,]", 2, "malformed"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring 3 [8] broken 1-0", 2, "low-high"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring 3 [8] broken 0-8", 2, "below 8"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring 3 [8]  broken 0-1", 2, "`[8] broken 0-1`"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring 3 [8] broken 2-3,0-1", 2, "write `[8] broken 0-1,2-3`"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring 3 [ 8 ]", 2, "write `[8]`"),
            ("oxccl-tune 1\nall_reduce 8 float 1024 ring inf [8]", 2, "positive"),
            ("oxccl-tune 1\nall_reduce 8 float 1024", 2, "missing the executor"),
            (
                "oxccl-tune 1\nall_reduce 8 float 1024 ring 3 [8]\nall_reduce 8 float 1024 ring 4 [8]",
                3,
                "line 2",
            ),
        ];
        for (text, line, needle) in cases {
            let err = TuneTable::parse(text).unwrap_err();
            assert_eq!(err.line, Some(line), "{text:?}: {err}");
            let message = crate::error::with_causes(&err);
            assert!(message.contains(&format!("line {line}")), "{message}");
            assert!(message.contains(needle), "{needle:?} not in {message}");
        }
        let err = TuneTable::parse("# only a comment\n").unwrap_err();
        assert!(err.to_string().contains("oxccl-tune 1"), "{err}");
    }

    #[test]
    fn a_repeat_far_down_a_large_table_names_both_lines() {
        let mut text = String::from("oxccl-tune 1\n");
        for bytes in 0..20_000 {
            text.push_str(&format!("all_reduce 8 float {bytes} ring 3 [8]\n"));
        }
        text.push_str("all_reduce 8 float 7 ring 4 [8]\n");
        let err = TuneTable::parse(&text).unwrap_err();
        assert_eq!(err.line, Some(20_002), "{err}");
        assert!(err.to_string().contains("line 9 "), "{err}");
    }

    #[test]
    fn an_endless_file_is_refused_not_read_forever() {
        let err = TuneTable::load("/dev/zero").unwrap_err();
        let io = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .expect("an io::Error source");
        assert!(io.to_string().contains("larger than"), "{err}");
    }

    #[test]
    fn load_names_the_path() {
        let err = TuneTable::load("/no/such/tune.txt").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/no/such/tune.txt: cannot read"),
            "{err}"
        );
        let io = std::error::Error::source(&err).and_then(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(io.map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
        let path = std::env::temp_dir().join(format!("oxccl-tune-test-{}.txt", std::process::id()));
        std::fs::write(
            &path,
            "oxccl-tune 1\nall_reduce 8 float 1024 ring fast [8]\n",
        )
        .unwrap();
        let err = TuneTable::load(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("line 2"), "{message}");
    }

    #[test]
    fn picks_the_fastest_at_the_nearest_size_of_the_bucket() {
        let table = TuneTable {
            entries: vec![
                entry(1024, "one-shot", 10.0),
                entry(1024, "mesh", 20.0),
                entry(3000, "ring", 5.0),
                entry(4096, "mesh", 30.0),
                entry(4096, "ring", 40.0),
            ],
        };
        let pick = |bytes| {
            table
                .pick(&key(bytes), ALL)
                .map(|p| (p.executor, p.measured_bytes))
        };
        assert_eq!(pick(1024), Some(("one-shot".into(), 1024)));
        // 700 is in the bucket of 1024, (512, 1024].
        assert_eq!(pick(700), Some(("one-shot".into(), 1024)));
        // 3500 is nearer 3000 than 4096, in the same bucket (2048, 4096].
        assert_eq!(pick(3500), Some(("ring".into(), 3000)));
        assert_eq!(pick(4000), Some(("mesh".into(), 4096)));
        // 1025 is in (1024, 2048], where nothing was measured.
        assert_eq!(pick(1025), None);
        assert_eq!(pick(512), None);
        let p = table.pick(&key(1024), ALL).unwrap();
        assert_eq!(p.time_us, 10.0);
    }

    #[test]
    fn ignores_executors_that_are_not_candidates() {
        let table = TuneTable {
            entries: vec![
                entry(4096, "gone", 1.0),
                entry(4096, "mesh", 30.0),
                entry(4096, "ring", 20.0),
                entry(3000, "gone", 1.0),
            ],
        };
        let pick = |cands: &[&str]| table.pick(&key(3000), cands).map(|p| p.executor);
        // The nearest size with a candidate is 4096, not the 3000 of `gone`.
        assert_eq!(pick(&["mesh", "ring"]), Some("ring".into()));
        assert_eq!(pick(&["mesh"]), Some("mesh".into()));
        assert_eq!(pick(&["rhd"]), None);
    }

    #[test]
    fn other_operator_ranks_topology_or_dtype_do_not_match() {
        let table = TuneTable {
            entries: vec![entry(1024, "ring", 1.0)],
        };
        assert!(table.pick(&key(1024), ALL).is_some());
        let variants = [
            TuneKey {
                op: OpKind::AllGather,
                ..key(1024)
            },
            TuneKey {
                ranks: 4,
                ..key(1024)
            },
            TuneKey {
                topology: "[8] broken 0-1",
                ..key(1024)
            },
            TuneKey {
                dtype: DataType::F16,
                ..key(1024)
            },
        ];
        for k in variants {
            assert_eq!(table.pick(&k, ALL), None, "{k:?}");
        }
    }

    #[test]
    fn merge_replaces_the_series_it_measured() {
        let mut other_topology = entry(1024, "ring", 9.0);
        other_topology.topology = "[8] broken 0-1".into();
        let mut table = TuneTable {
            entries: vec![
                entry(1024, "ring", 9.0),
                entry(4096, "mesh", 9.0),
                other_topology.clone(),
            ],
        };
        table.merge(TuneTable {
            entries: vec![entry(1024, "mesh", 5.0)],
        });
        assert_eq!(
            table.entries,
            vec![other_topology, entry(1024, "mesh", 5.0)]
        );
    }

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(size_bucket(0), 1);
        assert_eq!(size_bucket(1), 1);
        assert_eq!(size_bucket(1024), 1024);
        assert_eq!(size_bucket(1025), 2048);
    }
}
