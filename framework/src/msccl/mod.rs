//! Algorithms as data: MSCCL-IR (XML) files imported as executors.
//!
//! Many published collective algorithms exist only as MSCCL-IR files, written by MSCCLang
//! (msccl-tools) and shipped with RCCL and microsoft/msccl. A file describes, per gpu
//! (rank), threadblocks of steps that send, receive, copy and reduce chunks of the input,
//! output and scratch buffers. oxccl reads such a file ([`read`]), checks the format's
//! rules with errors that name the file, line, gpu, threadblock and step ([`validate`]),
//! and turns it into an executor ([`executor`]) that is registered beside the built-in
//! ones: the analyzer proves its programs, the cost model times them, select_alg picks
//! it where it is fastest, and every device runs it.
//!
//! # Loading
//!
//! `OXCCL_ALGO_FILES` (files or folders, `:`-separated; a folder contributes its `*.xml`
//! files) and [`add_algo_files`] (what `--algo-file` of `oxccl check`, `perf` and `tune`
//! calls) name the files. They are read when the registry is first built, so they must be
//! named before the first collective; [`add_algo_files`] reads and checks its files at
//! once and reports the first bad one. Each file's executor is registered under the
//! operator of its `coll` and its `name`, made unique (`name`, then `name-2`, ... when a
//! built-in executor or another file has it). What decides where it applies: its `ngpus`
//! (the rank count), its root, its in-place flags, its byte range (`minBytes`/`maxBytes`,
//! over `count x type size x multiplier` as MSCCL measures it) and the size rule (`count x
//! multiplier` divisible by `nchunksperloop`); a call outside them does not have it as a
//! candidate, and `--explain` says why.
//!
//! Every process of a job must load the same files: the selection digest includes each
//! imported executor's file content, so a rank whose files differ is refused at init.

pub mod depth;
pub mod error;
pub mod executor;
mod geometry;
mod lower;
pub mod model;
pub mod read;
pub mod validate;
pub mod wiring;

pub use error::FileError;
pub use model::Algorithm;

use crate::digest::Digest;
use crate::error::Error;
use crate::executor::{AlgoFile, Constraints, ExecutorEntry, LinkNeed, Make};
use executor::{FileExecutor, Imported};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One file read and checked, not yet registered.
#[derive(Clone, Debug)]
pub struct Checked {
    pub path: String,
    pub algo: Algorithm,
    pub wiring: wiring::Wiring,
    /// The least message slots per connection its schedule needs ([`depth`]).
    pub depth: usize,
    /// FNV-1a of the file's bytes.
    pub content: u64,
}

/// Read and check the algorithm in `text`, from `file` (named in errors), and derive its
/// wiring and the FIFO depth its schedule needs.
pub fn import(file: &str, text: &str) -> Result<Checked, FileError> {
    let algo = read::read(file, text)?;
    let wiring = validate::validate(file, &algo)?;
    let depth = depth::fifo_depth(&algo, &wiring).ok_or_else(|| {
        FileError::new(
            file,
            error::Place::line(algo.line),
            format!(
                "its schedule does not complete with {} message slots per connection: a \
                 sender runs further ahead of its receiver than any FIFO holds (MSCCL's \
                 holds 8), and would wait for room forever",
                depth::MAX_DEPTH
            ),
        )
    })?;
    Ok(Checked {
        path: file.to_string(),
        content: Digest::new().bytes(text.as_bytes()).finish(),
        algo,
        wiring,
        depth,
    })
}

/// Read and check the file at `path`.
pub fn import_file(path: &Path) -> Result<Checked, FileError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path)
        .map_err(|e| FileError::new(&name, Default::default(), format!("cannot read it: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        FileError::new(
            &name,
            Default::default(),
            format!("malformed: not UTF-8 ({e})"),
        )
    })?;
    import(&name, &text)
}

/// The files `paths` name: files as given, folders by their `*.xml` files in name order.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, FileError> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let name = path.display().to_string();
        let entries = std::fs::read_dir(path).map_err(|e| {
            FileError::new(
                &name,
                Default::default(),
                format!("cannot list the folder: {e}"),
            )
        })?;
        let mut inside: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "xml") && p.is_file())
            .collect();
        inside.sort();
        files.extend(inside);
    }
    Ok(files)
}

/// Files named by [`add_algo_files`], read and checked, waiting for the registry; and
/// whether the registry has taken them (no file added later would be seen).
static ADDED: Mutex<(Vec<Checked>, bool)> = Mutex::new((Vec::new(), false));

/// Import the algorithm files (or folders of them) at `paths`, to be registered with the
/// executors when the registry is built. Every file is read and checked now; the first
/// that fails is the error, and none of `paths` is added then. Refused once the registry
/// exists (after the first communicator, registry lookup or [`Config::from_env`], which
/// reads the link channels the files need): a selection already made could not see them.
///
/// [`Config::from_env`]: crate::config::Config::from_env
pub fn add_algo_files(paths: &[PathBuf]) -> Result<(), Error> {
    let too_late = || {
        Error::Registry(
            "algorithm files must be added before the registry is first used (before the \
             first communicator, registry lookup or Config::from_env); add them at the start \
             of the program"
                .into(),
        )
    };
    if ADDED.lock().1 {
        return Err(too_late());
    }
    let checked = expand(paths)?
        .iter()
        .map(|p| import_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut added = ADDED.lock();
    // Checked again under the lock the registry takes the files with: a registry built
    // while these were read did not see them.
    if added.1 {
        return Err(too_late());
    }
    added.0.extend(checked);
    Ok(())
}

/// The executors of every file named by `OXCCL_ALGO_FILES` and [`add_algo_files`],
/// named uniquely against `taken` (the built-in names, per operator, lower case).
pub(crate) fn entries(
    taken: &dyn Fn(crate::op::OpKind, &str) -> bool,
) -> Result<Vec<&'static ExecutorEntry>, Error> {
    let mut files = {
        let mut added = ADDED.lock();
        added.1 = true;
        added.0.clone()
    };
    let from_env = crate::config::algo_files_from_env()?;
    for p in expand(&from_env)? {
        files.push(import_file(&p)?);
    }
    // Every process must name the same executor the same: order by what the files say,
    // never by where they are.
    files.sort_by(|a, b| {
        (a.algo.coll.name(), &a.algo.name, a.content).cmp(&(
            b.algo.coll.name(),
            &b.algo.name,
            b.content,
        ))
    });
    files.dedup_by(|a, b| a.content == b.content && a.algo.name == b.algo.name);
    let mut used: Vec<(crate::op::OpKind, String)> = Vec::new();
    let mut out = Vec::new();
    for file in files {
        let base = executor_name(&file.algo.name);
        let name = (1..)
            .map(|i| {
                if i == 1 {
                    base.clone()
                } else {
                    format!("{base}-{i}")
                }
            })
            .find(|n| {
                let lower = n.to_ascii_lowercase();
                !taken(file.algo.coll, &lower)
                    && !used
                        .iter()
                        .any(|(op, u)| *op == file.algo.coll && *u == lower)
            })
            .unwrap_or(base);
        used.push((file.algo.coll, name.to_ascii_lowercase()));
        out.push(entry(file, name));
    }
    Ok(out)
}

/// A file's `name` as an executor name: what `OXCCL_ALGO` and `--algo` can spell
/// (letters, digits, `.`, `_`, `-`; anything else becomes `-`), `msccl` when empty.
fn executor_name(name: &str) -> String {
    let clean: String = name
        .trim()
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || "._-".contains(c) {
            true => c,
            false => '-',
        })
        .collect();
    match clean.is_empty() {
        true => "msccl".into(),
        false => clean,
    }
}

/// The registry entry of one checked file, leaked: entries live as long as the process.
fn entry(file: Checked, name: String) -> &'static ExecutorEntry {
    let name: &'static str = Box::leak(name.into_boxed_str());
    let algo = file.algo;
    let description: &'static str = Box::leak(
        format!(
            "MSCCL-IR {} on {} gpus, {} chunks per loop, {} channel(s), {} threadblocks",
            algo.coll,
            algo.ngpus,
            algo.nchunksperloop,
            algo.nchannels,
            algo.gpus.iter().map(|g| g.tbs.len()).sum::<usize>()
        )
        .into_boxed_str(),
    );
    let origin: &'static AlgoFile = Box::leak(Box::new(AlgoFile {
        path: file.path,
        name: algo.name.clone(),
        content: file.content,
    }));
    let op = algo.coll;
    let imported = Arc::new(Imported {
        name,
        wiring: file.wiring,
        depth: file.depth,
        algo,
    });
    let constraints = Constraints {
        min_ranks: imported.algo.ngpus,
        max_ranks: imported.algo.ngpus,
        links: LinkNeed::Put,
        count_unit: imported.unit(),
        fixed_links: Box::leak(imported.links().into_boxed_slice()),
        root: op.has_root().then_some(imported.algo.root),
        link_channels: imported.algo.nchannels.saturating_mul(imported.depth),
        ..Constraints::ANY
    };
    let make: &'static (dyn Fn() -> Box<dyn crate::executor::Executor> + Send + Sync) =
        Box::leak(Box::new(move || {
            Box::new(FileExecutor(imported.clone())) as Box<dyn crate::executor::Executor>
        }));
    Box::leak(Box::new(ExecutorEntry {
        name,
        op,
        description,
        crate_name: "msccl-ir",
        constraints,
        preference: 0,
        make: Make::Shared(make),
        file: Some(origin),
    }))
}

#[cfg(test)]
mod tests;
