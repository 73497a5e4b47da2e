//! The topology file format (TOML), `--topo` specs and `--broken` pairs.
//!
//! A file describes servers and the rules of the link table; every key but `servers` is
//! optional, and what is omitted takes the preset figures (see [`super::presets`]):
//!
//! ```toml
#![doc = include_str!("example.toml")]
//! ```
//!
//! Every error names the line (and column, for syntax errors) and says what to change.

use super::{presets, Fabric, LinkSpec, NicScope, Processor, RanksRun, Topology, Wiring};
use crate::error::ConfigError;
use oxccl_platform::{LinkAccess, LinkKind, Rank};
use serde::Deserialize;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Why a topology spec, file or broken-link pair could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error(
        "unknown topology `{given}`: not a preset ({known}) and not an existing file; \
         name a preset or the path of a TOML topology file"
    )]
    Unknown { given: String, known: String },
    #[error("cannot read the topology file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}, line {line}, column {column}: not a topology file (TOML)")]
    Toml {
        /// The file's path, or `<string>`.
        origin: String,
        line: usize,
        column: usize,
        #[source]
        source: TomlCause,
    },
    #[error("{origin}, line {line}, column {column}: {message}")]
    File {
        /// The file's path, or `<string>`.
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("broken link `{given}` is invalid: {reason}")]
    Broken { given: String, reason: String },
    #[error("topology `{given}` is invalid: {reason}")]
    Shape { given: String, reason: String },
}

/// The TOML error behind [`TopologyError::Toml`], boxed to keep every `TopologyError`
/// small. It derefs to the TOML error, which is also what `source()` returns (so the
/// source downcasts to `toml::de::Error`, not to this box).
#[derive(Debug)]
pub struct TomlCause(Box<toml::de::Error>);

impl std::ops::Deref for TomlCause {
    type Target = toml::de::Error;

    fn deref(&self) -> &toml::de::Error {
        &self.0
    }
}

impl From<TopologyError> for ConfigError {
    fn from(err: TopologyError) -> Self {
        let value = match &err {
            TopologyError::Unknown { given, .. }
            | TopologyError::Broken { given, .. }
            | TopologyError::Shape { given, .. } => given.clone(),
            TopologyError::Read { path, .. } => path.display().to_string(),
            TopologyError::File { origin, .. } | TopologyError::Toml { origin, .. } => {
                origin.clone()
            }
        };
        ConfigError::new("topology", value, crate::config::TOPOLOGY_REFUSED).caused_by(err)
    }
}

impl From<TopologyError> for crate::error::Error {
    fn from(err: TopologyError) -> Self {
        ConfigError::from(err).into()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    servers: Spanned<Vec<usize>>,
    intra: Option<Spanned<FabricSpec>>,
    inter: Option<Spanned<FabricSpec>>,
    #[serde(default)]
    link: Vec<Spanned<LinkEntry>>,
    #[serde(default)]
    broken: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FabricSpec {
    wiring: Option<WiringName>,
    kind: Option<KindName>,
    access: Option<AccessName>,
    bandwidth_gbps: Option<f64>,
    latency_us: Option<f64>,
    shared_nic: Option<bool>,
    nic_gbps: Option<f64>,
    nic_shared_by: Option<NicScopeName>,
    memory_gbps: Option<f64>,
    workers: Option<usize>,
    task_us: Option<f64>,
    wake_us: Option<f64>,
    thread_gbps: Option<f64>,
    inline_bytes: Option<usize>,
    split_bytes: Option<usize>,
    ranks: Option<RanksName>,
    cache_bytes: Option<usize>,
    cache_gbps: Option<f64>,
    llc_bytes: Option<usize>,
    forward_gbps: Option<f64>,
}

impl FabricSpec {
    /// The CPU host's processor this table describes, when it gives any of its keys (the
    /// others take the reference figures of [`Processor::reference`]).
    fn processor(&self) -> Option<Processor> {
        let given = self.workers.is_some()
            || self.task_us.is_some()
            || self.wake_us.is_some()
            || self.thread_gbps.is_some()
            || self.inline_bytes.is_some()
            || self.split_bytes.is_some()
            || self.ranks.is_some()
            || self.cache_bytes.is_some()
            || self.cache_gbps.is_some()
            || self.llc_bytes.is_some()
            || self.forward_gbps.is_some();
        let reference = Processor::reference(presets::HOST_WORKERS);
        given.then(|| Processor {
            workers: self.workers.unwrap_or(reference.workers),
            task_us: self.task_us.unwrap_or(reference.task_us),
            wake_us: self.wake_us.unwrap_or(reference.wake_us),
            thread_gbps: self.thread_gbps.unwrap_or(reference.thread_gbps),
            inline_bytes: self.inline_bytes.unwrap_or(reference.inline_bytes),
            split_bytes: self.split_bytes.unwrap_or(reference.split_bytes),
            ranks: self.ranks.map_or(reference.ranks, RanksRun::from),
            cache_bytes: self.cache_bytes.unwrap_or(reference.cache_bytes),
            cache_gbps: self.cache_gbps.unwrap_or(reference.cache_gbps),
            llc_bytes: self.llc_bytes.unwrap_or(reference.llc_bytes),
            forward_gbps: self.forward_gbps.unwrap_or(reference.forward_gbps),
        })
    }
}

#[derive(Deserialize, Copy, Clone)]
#[serde(rename_all = "lowercase")]
enum WiringName {
    Mesh,
    Ring,
    Plane,
    None,
}

#[derive(Deserialize, Copy, Clone)]
#[serde(rename_all = "lowercase")]
enum RanksName {
    Pool,
    Processes,
}

impl From<RanksName> for RanksRun {
    fn from(name: RanksName) -> Self {
        match name {
            RanksName::Pool => RanksRun::InPool,
            RanksName::Processes => RanksRun::Processes,
        }
    }
}

#[derive(Deserialize, Copy, Clone)]
#[serde(rename_all = "lowercase")]
enum NicScopeName {
    Rank,
    Server,
}

impl From<NicScopeName> for NicScope {
    fn from(name: NicScopeName) -> Self {
        match name {
            NicScopeName::Rank => NicScope::Rank,
            NicScopeName::Server => NicScope::Server,
        }
    }
}

#[derive(Deserialize, Copy, Clone)]
#[serde(rename_all = "lowercase")]
enum KindName {
    Sdma,
    Rdma,
}

impl KindName {
    fn kind(self) -> LinkKind {
        match self {
            KindName::Sdma => LinkKind::Sdma,
            KindName::Rdma => LinkKind::Rdma,
        }
    }
}

/// `access = "load-store" | "put"`; serde's error for any other word names both.
#[derive(Deserialize, Copy, Clone)]
enum AccessName {
    #[serde(rename = "load-store")]
    LoadStore,
    #[serde(rename = "put")]
    Put,
}

impl AccessName {
    fn access(self) -> LinkAccess {
        match self {
            AccessName::LoadStore => LinkAccess::LoadStore,
            AccessName::Put => LinkAccess::Put,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkEntry {
    ranks: Option<Vec<usize>>,
    from: Option<usize>,
    to: Option<usize>,
    kind: Option<KindName>,
    access: Option<AccessName>,
    bandwidth_gbps: Option<f64>,
    latency_us: Option<f64>,
}

/// Where an error points: the text and its origin, to turn byte spans into lines.
struct Source<'a> {
    text: &'a str,
    origin: String,
}

impl Source<'_> {
    /// The 1-based line and column of the start of `span` (of the text's start without one).
    fn place(&self, span: Option<Range<usize>>) -> (usize, usize) {
        let at = span.map_or(0, |s| s.start).min(self.text.len());
        let before = &self.text[..at];
        let line = before.matches('\n').count() + 1;
        let column = before.chars().rev().take_while(|&c| c != '\n').count() + 1;
        (line, column)
    }

    fn error(&self, span: Option<Range<usize>>, message: impl Into<String>) -> TopologyError {
        let (line, column) = self.place(span);
        TopologyError::File {
            origin: self.origin.clone(),
            line,
            column,
            message: message.into(),
        }
    }

    /// The text is not TOML, or not TOML of the topology format.
    fn toml_error(&self, source: toml::de::Error) -> TopologyError {
        let (line, column) = self.place(source.span());
        TopologyError::Toml {
            origin: self.origin.clone(),
            line,
            column,
            source: TomlCause(Box::new(source)),
        }
    }
}

impl Topology {
    /// A preset name (see [`presets::PRESETS`]) or the path of a TOML topology file.
    pub fn parse_spec(spec: &str) -> Result<Topology, TopologyError> {
        if let Some(t) = presets::preset(spec) {
            return Ok(t);
        }
        let shape_error = presets::shape(spec)
            .and_then(Result::err)
            .or_else(|| presets::host_ranks(spec).and_then(Result::err));
        if let Some(reason) = shape_error {
            return Err(TopologyError::Shape {
                given: spec.to_string(),
                reason,
            });
        }
        let path = Path::new(spec);
        if path.exists() || spec.ends_with(".toml") {
            return Topology::from_toml_file(path);
        }
        Err(TopologyError::Unknown {
            given: spec.to_string(),
            known: presets::PRESETS
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Read and parse a TOML topology file.
    pub fn from_toml_file(path: &Path) -> Result<Topology, TopologyError> {
        let text =
            crate::limits::read_bounded(path, MAX_TOPOLOGY_FILE_BYTES).map_err(|source| {
                TopologyError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            })?;
        parse(&Source {
            text: &text,
            origin: path.display().to_string(),
        })
    }

    /// Parse a TOML topology (the format of this module's docs).
    pub fn from_toml(text: &str) -> Result<Topology, TopologyError> {
        parse(&Source {
            text,
            origin: "<string>".into(),
        })
    }

    /// The topology as a TOML file that [`Topology::from_toml`] reads back unchanged.
    pub fn to_toml(&self) -> String {
        let mut out = format!("servers = {:?}\n", self.server_sizes());
        let broken: Vec<String> = self
            .broken_links()
            .map(|(a, b)| format!("\"{a}-{b}\""))
            .collect();
        if !broken.is_empty() {
            let _ = writeln!(out, "broken = [{}]", broken.join(", "));
        }
        write_fabric(&mut out, Table::Intra, &self.intra);
        if let Some(gbps) = self.memory_gbps {
            let _ = writeln!(out, "memory_gbps = {gbps:?}");
        }
        if let Some(p) = &self.processor {
            let _ = writeln!(
                out,
                "workers = {}\ntask_us = {:?}\nwake_us = {:?}\nthread_gbps = {:?}\n\
                 inline_bytes = {}\nsplit_bytes = {}\nranks = \"{}\"\n\
                 cache_bytes = {}\ncache_gbps = {:?}\nllc_bytes = {}\nforward_gbps = {:?}",
                p.workers,
                p.task_us,
                p.wake_us,
                p.thread_gbps,
                p.inline_bytes,
                p.split_bytes,
                p.ranks.name(),
                p.cache_bytes,
                p.cache_gbps,
                p.llc_bytes,
                p.forward_gbps
            );
        }
        write_fabric(&mut out, Table::Inter, &self.inter);
        match self.nic_gbps {
            Some(gbps) => {
                let _ = writeln!(out, "nic_gbps = {gbps:?}");
                let _ = writeln!(out, "nic_shared_by = \"{}\"", self.nic_scope().name());
            }
            None => out.push_str("shared_nic = false\n"),
        }
        for (&(low, high), pair) in self.overrides() {
            if pair.up == pair.down {
                let _ = write!(out, "\n[[link]]\nranks = [{low}, {high}]\n");
                write_spec(&mut out, &pair.up);
            } else {
                for (from, to, spec) in [(low, high, &pair.up), (high, low, &pair.down)] {
                    let _ = write!(out, "\n[[link]]\nfrom = {from}\nto = {to}\n");
                    write_spec(&mut out, spec);
                }
            }
        }
        out
    }
}

/// Largest topology file read: a [`crate::limits::MAX_RANKS`]-rank machine with a
/// `[[link]]` per pair fits in a few MiB; anything larger (`/dev/zero`) is refused instead
/// of read without end.
pub const MAX_TOPOLOGY_FILE_BYTES: usize = 16 << 20;

fn write_spec(out: &mut String, spec: &LinkSpec) {
    let kind = match spec.kind {
        LinkKind::Sdma => "sdma",
        LinkKind::Rdma => "rdma",
    };
    let _ = writeln!(out, "kind = \"{kind}\"");
    let _ = writeln!(out, "access = \"{}\"", spec.access.name());
    let _ = writeln!(out, "bandwidth_gbps = {:?}", spec.bandwidth_gbps);
    let _ = writeln!(out, "latency_us = {:?}", spec.latency_us);
}

fn write_fabric(out: &mut String, table: Table, fabric: &Fabric) {
    let _ = write!(
        out,
        "\n[{}]\nwiring = \"{}\"\n",
        table.name(),
        fabric.wiring.name()
    );
    write_spec(out, &fabric.spec);
}

/// Parse `A-B` (as in `--broken 0-1`) into two distinct ranks.
pub fn parse_broken(given: &str) -> Result<(Rank, Rank), TopologyError> {
    let bad = |reason: &str| TopologyError::Broken {
        given: given.to_string(),
        reason: reason.to_string(),
    };
    let (a, b) = given
        .split_once('-')
        .ok_or_else(|| bad("write it as two ranks joined by a dash, e.g. 0-1"))?;
    let rank = |s: &str| {
        s.trim()
            .parse::<Rank>()
            .map_err(|_| bad("both ends must be rank numbers, e.g. 0-1"))
    };
    let (a, b) = (rank(a)?, rank(b)?);
    if a == b {
        return Err(bad("a link joins two different ranks"));
    }
    Ok((a, b))
}

fn parse(src: &Source<'_>) -> Result<Topology, TopologyError> {
    let spec: FileSpec = toml::from_str(src.text).map_err(|e| src.toml_error(e))?;
    let servers = spec.servers.span();
    let intra = fabric(src, spec.intra.as_ref(), Table::Intra)?;
    let inter = fabric(src, spec.inter.as_ref(), Table::Inter)?;
    let nic = nic_gbps(src, spec.inter.as_ref(), &inter)?;
    let nic_scope = nic_scope(src, spec.inter.as_ref(), nic)?;
    let memory = spec.intra.as_ref().and_then(|f| f.get_ref().memory_gbps);
    let processor = spec.intra.as_ref().and_then(|f| f.get_ref().processor());
    let mut t = Topology::from_fabrics(spec.servers.into_inner(), intra, inter, nic)
        .map_err(|e| src.error(Some(servers), format!("{}; {SERVERS_HINT}", e.reason)))?
        .with_nic_scope(nic_scope)
        .with_memory_gbps(memory)
        .and_then(|t| t.with_processor(processor))
        .map_err(|e| {
            let span = spec.intra.as_ref().map(|f| f.span());
            src.error(span, format!("[intra] {}: {}", e.value, e.reason))
        })?;
    for entry in &spec.link {
        t = apply_link(src, t, entry)?;
    }
    for pair in &spec.broken {
        let (a, b) = parse_broken(pair.get_ref()).map_err(|e| match e {
            TopologyError::Broken { given, reason } => src.error(
                Some(pair.span()),
                format!("broken link `{given}` is invalid: {reason}"),
            ),
            other => other,
        })?;
        t = t.with_broken(a, b).map_err(|e| {
            src.error(
                Some(pair.span()),
                format!("broken link {a}-{b}: {}", e.reason),
            )
        })?;
    }
    Ok(t)
}

const SERVERS_HINT: &str =
    "`servers` must list at least one server, each with at least one rank, e.g. servers = [8, 8]";

/// The two fabric tables of a file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Table {
    Intra,
    Inter,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Intra => "intra",
            Table::Inter => "inter",
        }
    }

    fn default_fabric(self) -> Fabric {
        match self {
            Table::Intra => presets::hccs(Wiring::Mesh),
            Table::Inter => presets::roce(Wiring::Mesh),
        }
    }
}

fn fabric(
    src: &Source<'_>,
    given: Option<&Spanned<FabricSpec>>,
    table: Table,
) -> Result<Fabric, TopologyError> {
    let default = table.default_fabric();
    let Some(given) = given else {
        return Ok(default);
    };
    let (span, f) = (given.span(), given.get_ref());
    let wiring = match (f.wiring, table) {
        (None, _) => default.wiring,
        (Some(WiringName::Mesh), _) => Wiring::Mesh,
        (Some(WiringName::None), _) => Wiring::None,
        (Some(WiringName::Ring), Table::Intra) => Wiring::Ring,
        (Some(WiringName::Plane), Table::Inter) => Wiring::Plane,
        (Some(_), _) => {
            let allowed = if table == Table::Intra {
                "mesh, ring or none"
            } else {
                "mesh, plane or none"
            };
            return Err(src.error(
                Some(span),
                format!("[{}] wiring must be {allowed}", table.name()),
            ));
        }
    };
    let nic_key = f.shared_nic.is_some() || f.nic_gbps.is_some() || f.nic_shared_by.is_some();
    if table == Table::Intra && nic_key {
        return Err(src.error(
            Some(span),
            "the NIC belongs in [inter]; move shared_nic, nic_gbps and nic_shared_by there",
        ));
    }
    if table == Table::Inter && f.memory_gbps.is_some() {
        return Err(src.error(
            Some(span),
            "a server's memory system belongs in [intra]; move memory_gbps there",
        ));
    }
    if table == Table::Inter && f.processor().is_some() {
        return Err(src.error(
            Some(span),
            "a host's processor belongs in [intra]; move workers, task_us, wake_us, \
             thread_gbps, inline_bytes, split_bytes, ranks, cache_bytes, cache_gbps, \
             llc_bytes and forward_gbps there",
        ));
    }
    let spec = LinkSpec {
        kind: f.kind.map_or(default.spec.kind, KindName::kind),
        access: f.access.map_or(default.spec.access, AccessName::access),
        bandwidth_gbps: f.bandwidth_gbps.unwrap_or(default.spec.bandwidth_gbps),
        latency_us: f.latency_us.unwrap_or(default.spec.latency_us),
    };
    check_figures(src, span, &spec, &format!("[{}]", table.name()))?;
    Ok(Fabric { spec, wiring })
}

fn nic_gbps(
    src: &Source<'_>,
    given: Option<&Spanned<FabricSpec>>,
    inter: &Fabric,
) -> Result<Option<f64>, TopologyError> {
    let Some(given) = given else {
        return Ok(Some(presets::ROCE_GBPS));
    };
    let f = given.get_ref();
    match (f.shared_nic.unwrap_or(true), f.nic_gbps) {
        (false, Some(_)) => Err(src.error(
            Some(given.span()),
            "[inter] sets nic_gbps but shared_nic = false; drop one of them",
        )),
        (false, None) => Ok(None),
        (true, None) => Ok(Some(inter.spec.bandwidth_gbps)),
        (true, Some(gbps)) if gbps.is_finite() && gbps > 0.0 => Ok(Some(gbps)),
        (true, Some(gbps)) => Err(src.error(
            Some(given.span()),
            format!("[inter] nic_gbps = {gbps} must be a positive number of GB/s"),
        )),
    }
}

/// Who shares a NIC (`nic_shared_by`, `rank` by default); refused without a NIC.
fn nic_scope(
    src: &Source<'_>,
    given: Option<&Spanned<FabricSpec>>,
    nic: Option<f64>,
) -> Result<NicScope, TopologyError> {
    let Some(given) = given else {
        return Ok(NicScope::Rank);
    };
    match (given.get_ref().nic_shared_by, nic) {
        (None, _) => Ok(NicScope::Rank),
        (Some(_), None) => Err(src.error(
            Some(given.span()),
            "[inter] sets nic_shared_by but shared_nic = false; drop one of them",
        )),
        (Some(name), Some(_)) => Ok(name.into()),
    }
}

fn check_figures(
    src: &Source<'_>,
    span: Range<usize>,
    spec: &LinkSpec,
    what: &str,
) -> Result<(), TopologyError> {
    if !(spec.bandwidth_gbps.is_finite() && spec.bandwidth_gbps > 0.0) {
        return Err(src.error(
            Some(span),
            format!("{what} bandwidth_gbps = {} must be a positive number of GB/s; to remove a link use `broken` or wiring = \"none\"", spec.bandwidth_gbps),
        ));
    }
    if !(spec.latency_us.is_finite() && spec.latency_us >= 0.0) {
        return Err(src.error(
            Some(span),
            format!(
                "{what} latency_us = {} must be zero or a positive number of microseconds",
                spec.latency_us
            ),
        ));
    }
    Ok(())
}

fn apply_link(
    src: &Source<'_>,
    t: Topology,
    entry: &Spanned<LinkEntry>,
) -> Result<Topology, TopologyError> {
    let (span, e) = (entry.span(), entry.get_ref());
    let (a, b, both) = match (e.ranks.as_deref(), e.from, e.to) {
        (Some(&[a, b]), None, None) => (a, b, true),
        (Some(ranks), None, None) => {
            return Err(src.error(
                Some(span),
                format!(
                    "[[link]] ranks = {ranks:?} names {} ranks; a link joins exactly two, \
                     e.g. ranks = [0, 1] (write one [[link]] per pair)",
                    ranks.len()
                ),
            ))
        }
        (None, Some(from), Some(to)) => (from, to, false),
        _ => {
            return Err(src.error(
                Some(span),
                "[[link]] needs either `ranks = [a, b]` (both directions) or `from` and `to` (one direction)",
            ))
        }
    };
    let n = t.ranks();
    if a == b || a >= n || b >= n {
        return Err(src.error(
            Some(span),
            format!("[[link]] {a}-{b} must join two different ranks below {n}"),
        ));
    }
    let mut result = t;
    for (from, to) in if both {
        vec![(a, b), (b, a)]
    } else {
        vec![(a, b)]
    } {
        let base = result
            .wired_spec(from, to)
            .unwrap_or_else(|| placement_default(&result, from, to));
        let spec = LinkSpec {
            kind: e.kind.map_or(base.kind, KindName::kind),
            access: e.access.map_or(base.access, AccessName::access),
            bandwidth_gbps: e.bandwidth_gbps.unwrap_or(base.bandwidth_gbps),
            latency_us: e.latency_us.unwrap_or(base.latency_us),
        };
        check_figures(src, span.clone(), &spec, &format!("[[link]] {from}-{to}"))?;
        result = result
            .with_link(from, to, spec)
            .map_err(|err| src.error(Some(span.clone()), err.reason))?;
    }
    Ok(result)
}

/// The fabric default for a pair the wiring does not join.
fn placement_default(t: &Topology, a: Rank, b: Rank) -> LinkSpec {
    if t.server_of(a) == t.server_of(b) {
        t.intra.spec
    } else {
        t.inter.spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::LinkStatus;

    #[test]
    fn the_documented_example_parses() {
        let t = Topology::from_toml(include_str!("example.toml")).unwrap();
        assert_eq!(t.ranks(), 16);
        assert_eq!(t.link_status(1, 0), LinkStatus::Broken);
        assert_eq!(t.link(8, 0).unwrap().bandwidth_gbps, 50.0);
        assert_eq!(t.link(0, 8).unwrap().kind, LinkKind::Rdma);
        assert_eq!(t.link(3, 4).unwrap().bandwidth_gbps, 28.0);
        assert_eq!(t.link(4, 3).unwrap().bandwidth_gbps, presets::HCCS_GBPS);
        assert_eq!(t.nic_gbps(), Some(25.0));
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
    }

    #[test]
    fn presets_survive_a_toml_round_trip() {
        for name in ["mesh8", "mesh8-cut", "ring8", "2x8", "3x4", "tcp8", "host8"] {
            let t = Topology::parse_spec(name).unwrap();
            assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t, "{name}");
        }
    }

    #[test]
    fn who_shares_a_nic_is_read_from_inter_and_round_trips() {
        let text = "servers = [4, 4]\n[inter]\nnic_gbps = 3.0\nnic_shared_by = \"server\"\n";
        let t = Topology::from_toml(text).unwrap();
        assert_eq!((t.nic_gbps(), t.nic_scope()), (Some(3.0), NicScope::Server));
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        let hosts = presets::hosts(vec![2, 2]).unwrap();
        assert_eq!(Topology::from_toml(&hosts.to_toml()).unwrap(), hosts);
        let by_rank = Topology::from_toml("servers = [2, 2]\n").unwrap();
        assert_eq!(by_rank.nic_scope(), NicScope::Rank, "the default");
        for (bad, says) in [
            (
                "servers = [2, 2]\n[inter]\nshared_nic = false\nnic_shared_by = \"rank\"\n",
                "drop one of them",
            ),
            (
                "servers = [2, 2]\n[intra]\nnic_shared_by = \"server\"\n",
                "belongs in [inter]",
            ),
        ] {
            let err = Topology::from_toml(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
        let err = Topology::from_toml("servers = [2, 2]\n[inter]\nnic_shared_by = \"host\"\n");
        assert!(err.is_err(), "an unknown scope is refused");
    }

    #[test]
    fn overrides_and_broken_links_round_trip() {
        let text = "servers = [4, 4]\nbroken = [\"1-2\"]\n[intra]\nwiring = \"ring\"\n\
                    [inter]\nwiring = \"plane\"\nshared_nic = false\n\
                    [[link]]\nranks = [0, 2]\nbandwidth_gbps = 7.5\n\
                    [[link]]\nfrom = 4\nto = 0\nlatency_us = 9.0\n";
        let t = Topology::from_toml(text).unwrap();
        assert_eq!(
            t.link(0, 2).unwrap().bandwidth_gbps,
            7.5,
            "added to the ring"
        );
        assert_eq!(t.link(0, 4).unwrap().latency_us, presets::ROCE_LATENCY_US);
        assert_eq!(t.link(4, 0).unwrap().latency_us, 9.0);
        assert_eq!(t.link_status(0, 5), LinkStatus::Missing, "plane wiring");
        assert_eq!(t.link_status(2, 1), LinkStatus::Broken);
        assert_eq!(t.nic_gbps(), None);
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let text = "servers = [8]\n\n[intra]\nbandwidth_gbps = -1.0\n";
        let err = Topology::from_toml(text).unwrap_err();
        let TopologyError::File { line, message, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(*line, 3, "{err}");
        assert!(message.contains("positive number of GB/s"), "{err}");

        let err = Topology::from_toml("servers = [8]\nbroken = [\"0-9\"]\n").unwrap_err();
        assert!(matches!(err, TopologyError::File { line: 2, .. }), "{err}");

        let err = Topology::from_toml("servers = [8]\nspeed = 3\n").unwrap_err();
        assert!(matches!(err, TopologyError::Toml { line: 2, .. }), "{err}");
        assert!(crate::error::with_causes(&err).contains("speed"), "{err}");
    }

    #[test]
    fn malformed_toml_keeps_the_toml_error_as_its_source() {
        let err = Topology::from_toml("servers = [8\n").unwrap_err();
        assert!(matches!(err, TopologyError::Toml { .. }), "{err:?}");
        let source = std::error::Error::source(&err).expect("a source");
        assert!(source.is::<toml::de::Error>(), "{source:?}");
        assert!(
            !err.to_string().contains(&source.to_string()),
            "the message does not repeat its source: {err}"
        );
    }

    #[test]
    fn a_missing_file_keeps_the_io_error_as_its_source() {
        let err = Topology::parse_spec("/nonexistent/topo.toml").unwrap_err();
        let io = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .expect("an io::Error source");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        // Through ConfigError and Error too.
        let err = crate::Error::from(err);
        let io = crate::error::chain(&err).find_map(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(io.map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    }

    /// The line and message of a file error (the TOML error's message for a TOML one).
    fn file_error(text: &str) -> (usize, String) {
        match Topology::from_toml(text) {
            Err(TopologyError::File { line, message, .. }) => (line, message),
            Err(TopologyError::Toml { line, source, .. }) => (line, source.message().into()),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn rank_counts_past_the_limit_name_the_servers_line() {
        for servers in [
            "[4097]",
            "[4096, 1]",
            "[9223372036854775807, 9223372036854775807]",
        ] {
            let (line, message) = file_error(&format!("# big\nservers = {servers}\n"));
            assert_eq!(line, 2, "{message}");
            assert!(message.contains("at most 4096"), "{message}");
        }
        let (line, message) = file_error("servers = [8]\nbroken = []\nservers = [-1]\n");
        assert_eq!(line, 3, "{message}");
        let (line, _) = file_error("\nservers = [18446744073709551615]\n");
        assert_eq!(line, 2);
        let (_, message) = file_error("servers = [-8]\n");
        assert!(message.contains("-8"), "{message}");
        assert_eq!(
            Topology::from_toml("servers = [1024]").unwrap().ranks(),
            1024
        );
    }

    #[test]
    fn access_is_read_per_fabric_and_per_link() {
        let text = "servers = [4, 4]\n[intra]\naccess = \"put\"\n\
                    [inter]\naccess = \"load-store\"\n\
                    [[link]]\nfrom = 0\nto = 1\naccess = \"load-store\"\n";
        let t = Topology::from_toml(text).unwrap();
        assert_eq!(t.link_access(1, 2), Some(LinkAccess::Put));
        assert_eq!(t.link_access(0, 5), Some(LinkAccess::LoadStore));
        assert_eq!(t.link_access(0, 1), Some(LinkAccess::LoadStore));
        assert_eq!(t.link_access(1, 0), Some(LinkAccess::Put));
        assert_eq!(t.describe(), "[4,4] put some");
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        let defaults = Topology::from_toml("servers = [2, 2]").unwrap();
        assert_eq!(defaults.link_access(0, 1), Some(LinkAccess::LoadStore));
        assert_eq!(defaults.link_access(0, 2), Some(LinkAccess::Put));
        let (line, message) = file_error("servers = [8]\n[intra]\naccess = \"read\"\n");
        assert_eq!(line, 3, "{message}");
        assert!(
            message.contains("load-store") && message.contains("put"),
            "{message}"
        );
    }

    #[test]
    fn a_shared_memory_system_is_read_from_intra_only() {
        let t = Topology::from_toml("servers = [4, 4]\n[intra]\nmemory_gbps = 30.0\n").unwrap();
        assert_eq!(t.memory_gbps(), Some(30.0));
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        assert_eq!(
            Topology::from_toml("servers = [4]").unwrap().memory_gbps(),
            None
        );
        for bad in ["0.0", "-3.0", "nan", "inf"] {
            let (line, message) =
                file_error(&format!("servers = [8]\n[intra]\nmemory_gbps = {bad}\n"));
            assert_eq!(line, 2, "{bad}: {message}");
            assert!(
                message.contains("positive number of GB/s"),
                "{bad}: {message}"
            );
        }
        let (line, message) = file_error("servers = [2, 2]\n[inter]\nmemory_gbps = 9.0\n");
        assert_eq!(line, 2, "{message}");
        assert!(message.contains("belongs in [intra]"), "{message}");
    }

    #[test]
    fn a_hosts_processor_is_read_from_intra_with_reference_figures_for_the_rest() {
        let t =
            Topology::from_toml("servers = [4]\n[intra]\nworkers = 16\ntask_us = 0.2\n").unwrap();
        let p = t.processor().copied().unwrap();
        assert_eq!((p.workers, p.task_us), (16, 0.2));
        assert_eq!(p.thread_gbps, presets::HOST_LINK_GBPS);
        assert_eq!(p.cache_bytes, presets::HOST_CACHE_BYTES);
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        let cache =
            "servers = [4]\n[intra]\ncache_bytes = 1048576\ncache_gbps = 30.0\nllc_bytes = 4194304\nforward_gbps = 9.5\n";
        let t = Topology::from_toml(cache).unwrap();
        let p = t.processor().copied().unwrap();
        assert_eq!((p.cache_bytes, p.cache_gbps), (1 << 20, 30.0));
        assert_eq!(p.llc_bytes, 4 << 20);
        assert_eq!(p.forward_gbps, 9.5);
        assert_eq!(p.workers, presets::HOST_WORKERS);
        assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t);
        assert!(Topology::from_toml("servers = [4]")
            .unwrap()
            .processor()
            .is_none());
        for bad in [
            "workers = 0",
            "task_us = -1.0",
            "wake_us = nan",
            "thread_gbps = 0.0",
            "cache_gbps = -2.0",
        ] {
            let (line, message) = file_error(&format!("servers = [8]\n[intra]\n{bad}\n"));
            assert_eq!(line, 2, "{bad}: {message}");
            let key = bad.split(' ').next().unwrap();
            assert!(message.contains(key), "{bad}: {message}");
        }
        let (line, message) = file_error("servers = [2, 2]\n[inter]\nworkers = 4\n");
        assert_eq!(line, 2, "{message}");
        assert!(
            message.contains("processor belongs in [intra]"),
            "{message}"
        );
    }

    #[test]
    fn a_hosts_ranks_are_a_pool_unless_the_file_says_processes() {
        let read = |keys: &str| {
            let t = Topology::from_toml(&format!("servers = [4]\n[intra]\n{keys}\n")).unwrap();
            assert_eq!(Topology::from_toml(&t.to_toml()).unwrap(), t, "round trip");
            *t.processor().unwrap()
        };
        let pool = read("workers = 2");
        assert_eq!(pool.ranks, RanksRun::InPool);
        assert_eq!(pool.inline_limit(), pool.inline_bytes);
        // Processes are said so, not read from `inline_bytes = 0`, and never run inline.
        let apart = read("ranks = \"processes\"");
        assert!(apart.ranks_are_processes());
        assert_eq!(apart.inline_limit(), 0);
        assert_eq!(apart.inline_bytes, pool.inline_bytes);
        assert!(!read("inline_bytes = 0").ranks_are_processes());
        let (line, message) = file_error("servers = [4]\n[intra]\nranks = \"threads\"\n");
        assert_eq!(line, 3, "{message}");
        assert!(
            message.contains("pool") && message.contains("processes"),
            "{message}"
        );
    }

    #[test]
    fn a_link_of_three_ranks_names_its_line() {
        let text = "servers = [8]\n\n[[link]]\nranks = [0, 1, 2]\nbandwidth_gbps = 5.0\n";
        let (line, message) = file_error(text);
        assert!((3..=4).contains(&line), "line {line}: {message}");
        assert!(message.contains("two"), "{message}");
        let (_, message) = file_error("servers = [8]\n[[link]]\nranks = [3]\n");
        assert!(message.contains("two"), "{message}");
    }

    #[test]
    fn oversized_shapes_name_the_limit() {
        for spec in [
            "99999999999x99999999999",
            "1x5000",
            "2x99999999999999999999999",
        ] {
            let err = Topology::parse_spec(spec).unwrap_err();
            assert!(matches!(err, TopologyError::Shape { .. }), "{spec}: {err}");
            assert!(err.to_string().contains("at most 4096"), "{spec}: {err}");
        }
    }

    #[test]
    fn specs_and_broken_pairs_parse() {
        assert_eq!(parse_broken("3-1").unwrap(), (3, 1));
        assert!(parse_broken("3").is_err() && parse_broken("2-2").is_err());
        let err = Topology::parse_spec("mesh-eight").unwrap_err();
        assert!(err.to_string().contains("ring8"), "{err}");
        let err = Topology::parse_spec("/nonexistent/topo.toml").unwrap_err();
        assert!(matches!(err, TopologyError::Read { .. }), "{err}");
        let err = Topology::parse_spec("/dev/zero").unwrap_err();
        assert!(
            crate::error::with_causes(&err).contains("larger than 16777216 bytes"),
            "{err}"
        );
    }
}
