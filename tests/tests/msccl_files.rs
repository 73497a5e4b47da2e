//! MSCCL-IR files imported as executors (issue 14), end to end in one process.
//!
//! - Every correct file the generators write (`oxccl_tests::msccl::correct_files`: each
//!   collective as a ring and all-pairs on 4, 8 and 16 ranks, AllReduce and AllGather also
//!   hierarchical) is registered under its `name`, passes the analyzer's conformance
//!   matrix on the shapes of its rank count, and computes exactly the reference data on
//!   the host device, zero-copy, staged and over put-only links; a count off its unit and
//!   the in-place form (every generated file says `inplace="0"`) are refused with typed
//!   errors.
//! - Their in-place variants (the same schedules saying `inplace="1"`) run in place.
//! - A file that needs more link channels than the communicator has is refused, naming
//!   the setting.
//! - The files broken on purpose are refused at import with the file, the line and the
//!   rule; the well-formed but wrong ones import and fail the analyzer's check that
//!   catches them.
//! - The big 16-rank file (24 threadblocks per gpu, about 1.4 MB) imports and is proved.
//!
//! The files are written to a fresh folder and registered once, before anything builds
//! the registry ([`loaded`], which every test calls first). The default run gives each
//! file every dtype once per mode on the host (counts and reduce ops rotating);
//! `every_file_full_matrix` (ignored) runs every dtype x op x count in every mode.

use oxccl::framework::analyzer::conformance::{self, conformance, shapes, unit_cases, Outcome};
use oxccl::framework::analyzer::{analyze, Check, Recording};
use oxccl::framework::msccl::error::Place;
use oxccl::framework::msccl::executor::{FileExecutor, Imported};
use oxccl::framework::msccl::model::{Algorithm, BufName, ChunkRef, StepKind};
use oxccl::framework::msccl::{add_algo_files, import, import_file, Checked};
use oxccl::framework::planner::{mode_for, record_every_rank, Setting};
use oxccl::framework::LinkNeed;
use oxccl::{
    Communicator, Config, DataType, Error, OpKind, OpParam, ReduceOp, Topology, UserBuffers,
};
use oxccl_tests::msccl::{big_file, broken_files, correct_files, Coll, GenFile, Verdict};
use oxccl_tests::{all_reduce_on, blocks, rooted, test_device, Aligned, Case};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Link channels of every communicator and recording here: at least what any catalogue
/// file needs, its channels times the message slots its schedule needs (checked by
/// `every_file_is_registered`).
const LINK_CHANNELS: usize = 16;

/// CCL buffers of the host runs: small, so that the largest count runs the staged loop
/// several times, the last iteration shorter.
const CCL_BYTES: usize = 64 << 10;

/// The operator of a generated file's collective.
fn op_kind(coll: Coll) -> OpKind {
    match coll {
        Coll::AllReduce => OpKind::AllReduce,
        Coll::AllGather => OpKind::AllGather,
        Coll::ReduceScatter => OpKind::ReduceScatter,
        Coll::AllToAll => OpKind::AlltoAll,
        Coll::Broadcast => OpKind::Broadcast,
        Coll::Reduce => OpKind::Reduce,
        Coll::Gather => OpKind::Gather,
        Coll::Scatter => OpKind::Scatter,
    }
}

/// The registered name of a generated file: its `name` attribute, which is its file name
/// less `.xml`.
fn algo_name(f: &GenFile) -> &str {
    f.name
        .strip_suffix(".xml")
        .expect("generated names end in .xml")
}

// --- loading ----------------------------------------------------------------------------

/// What [`loaded`] did, once for the whole binary.
struct Loaded {
    /// Every broken file the importer must reject, where it was written, and what
    /// `add_algo_files` said of it.
    rejected: Vec<(GenFile, PathBuf, String)>,
    /// Where each file was written, by file name.
    paths: Vec<(String, PathBuf)>,
    /// How long importing the big file took.
    big_import: Duration,
}

impl Loaded {
    fn path(&self, name: &str) -> &PathBuf {
        &self
            .paths
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} was not written"))
            .1
    }
}

static LOADED: OnceLock<Loaded> = OnceLock::new();

/// The temporary folder's name, before the process id.
const FOLDER: &str = "oxccl-msccl-files-";

/// The folder outlives the tests that read it (a static is never dropped), so each run
/// removes those of runs whose process is gone: one is left at most.
fn remove_folders_of_ended_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.strip_prefix(FOLDER));
        let ended = pid
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
        if ended {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Write every generated file to a fresh folder; offer each broken file the importer must
/// reject to `add_algo_files` (which adds nothing when it fails), then register every
/// correct file, its in-place variant and the big file. The wrong (well-formed) files are
/// not registered: they would be candidates under the names of the correct files they
/// were made from. Runs once, before any test touches the registry.
fn loaded() -> &'static Loaded {
    LOADED.get_or_init(|| {
        remove_folders_of_ended_runs();
        let dir = std::env::temp_dir().join(format!("{FOLDER}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let mut registered = correct_files();
        registered.extend(in_place_variants());
        registered.push(big_file());
        let mut paths = Vec::new();
        for f in registered.iter().chain(&broken_files()) {
            let path = dir.join(&f.name);
            std::fs::write(&path, &f.xml).expect("writes the file");
            paths.push((f.name.clone(), path));
        }
        let at = |name: &str| paths.iter().find(|(n, _)| n == name).unwrap().1.clone();
        let mut rejected = Vec::new();
        for f in broken_files() {
            if let Verdict::Rejected(_) = f.verdict {
                let path = at(&f.name);
                let err = match add_algo_files(std::slice::from_ref(&path)) {
                    Ok(()) => panic!("{} was accepted", f.name),
                    Err(e) => e.to_string(),
                };
                rejected.push((f, path, err));
            }
        }
        let start = Instant::now();
        import_file(&at(&big_file().name)).unwrap_or_else(|e| panic!("{e}"));
        let big_import = start.elapsed();
        let files: Vec<PathBuf> = registered.iter().map(|f| at(&f.name)).collect();
        add_algo_files(&files).unwrap_or_else(|e| panic!("{e}"));
        Loaded {
            rejected,
            paths,
            big_import,
        }
    })
}

/// The in-place variant of every correct file but the AlltoAll ones (AlltoAll has no
/// in-place form): the same schedule, named `<name>-inplace`, saying `inplace="1"`. In
/// microsoft/msccl's dialect (the rings and hierarchical files, which also say
/// `outofplace="1"`) it may run both ways, in place on the one buffer the user passes;
/// in RCCL's (the all-pairs files: `inplace` alone) in place only.
fn in_place_variants() -> Vec<GenFile> {
    correct_files()
        .into_iter()
        .filter(|f| f.coll != Coll::AllToAll)
        .map(|f| {
            let name = algo_name(&f).to_string();
            let xml = f
                .xml
                .replacen(
                    &format!("name=\"{name}\""),
                    &format!("name=\"{name}-inplace\""),
                    1,
                )
                .replacen("inplace=\"0\"", "inplace=\"1\"", 1);
            assert!(xml.contains("inplace=\"1\"") && xml.contains("-inplace\""));
            GenFile {
                name: format!("{name}-inplace.xml"),
                xml,
                ..f
            }
        })
        .collect()
}

/// Whether `algo`, called in place, has a `cpy` step whose source and destination are
/// the same bytes of the one buffer: a rank's own block copied to where it already lies
/// (AllGather's and Gather's `i -> o[rank]`, a Broadcast root's `i -> o`, Scatter's
/// `i[rank] -> o`). Only an algorithm that also runs out of place keeps both buffers in
/// place; one that runs in place only is read as one buffer by the importer.
fn copies_onto_itself(algo: &Algorithm) -> bool {
    let (i, o) = algo.coll.buffer_counts(1, algo.ngpus);
    algo.inplace
        && algo.outofplace
        && algo.gpus.iter().any(|g| {
            // A chunk's place in the one buffer (the larger side), in chunks.
            let at = |c: ChunkRef| match c.buf {
                BufName::Input if i < o => Some(g.id * g.i_chunks + c.off),
                BufName::Output if o < i => Some(g.id * g.o_chunks + c.off),
                BufName::Input | BufName::Output => Some(c.off),
                BufName::Scratch => None,
            };
            g.tbs.iter().flat_map(|t| &t.steps).any(|s| {
                let overlap = match (at(s.src), at(s.dst)) {
                    (Some(a), Some(b)) => a < b + s.cnt && b < a + s.cnt,
                    _ => false,
                };
                s.kind == StepKind::Copy && s.src.buf != s.dst.buf && overlap
            })
        })
}

/// The in-place variants that have no such copy, and those that do.
fn in_place_variants_split() -> (Vec<GenFile>, Vec<GenFile>) {
    in_place_variants()
        .into_iter()
        .partition(|f| !copies_onto_itself(&import(&f.name, &f.xml).unwrap().algo))
}

/// What the tests need of one registered file.
#[derive(Clone, Debug)]
struct File {
    name: &'static str,
    kind: OpKind,
    ranks: usize,
    root: Option<usize>,
    unit: usize,
    /// It runs in place; out of place.
    in_place: bool,
    out_of_place: bool,
}

impl File {
    fn of(f: &GenFile) -> File {
        loaded();
        let kind = op_kind(f.coll);
        let entry = oxccl::registry()
            .and_then(|r| r.executor(kind, algo_name(f)))
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let algo = import(&f.name, &f.xml).unwrap().algo;
        File {
            name: entry.name,
            kind,
            ranks: f.ranks,
            root: f.coll.rooted().then_some(f.root),
            unit: entry.constraints.count_unit,
            in_place: algo.inplace,
            out_of_place: algo.outofplace,
        }
    }

    /// Every rank's parameters for `count` elements (with the file's root).
    fn op(&self, dtype: DataType, op: ReduceOp, count: usize) -> OpParam {
        OpParam {
            root: self.root,
            ..OpParam::new(self.kind, count, dtype, op)
        }
    }
}

/// The smallest count whose chunks are whole, computed here from the file.
fn unit_of(checked: &Checked) -> usize {
    let (i, o) = checked.algo.coll.buffer_counts(1, checked.algo.ngpus);
    let chunks = checked.algo.nchunksperloop;
    (1..=chunks)
        .find(|u| (u * i.max(o)).is_multiple_of(chunks))
        .unwrap()
}

// --- registration -------------------------------------------------------------------------

#[test]
fn every_file_is_registered() {
    loaded();
    let registry = oxccl::registry().expect("registry");
    for f in correct_files().iter().chain(&in_place_variants()) {
        let kind = op_kind(f.coll);
        let entry = registry
            .executors_for(kind)
            .find(|e| e.name == algo_name(f))
            .unwrap_or_else(|| panic!("{} is not registered for {kind}", f.name));
        assert_eq!(entry.crate_name, "msccl-ir", "{}", f.name);
        let origin = entry.file.expect("an imported executor names its file");
        assert_eq!(origin.name, algo_name(f));
        assert!(origin.path.ends_with(&f.name), "{}", origin.path);
        assert_eq!(
            (entry.constraints.min_ranks, entry.constraints.max_ranks),
            (f.ranks, f.ranks)
        );
        assert!(!entry.constraints.fixed_links.is_empty(), "{}", f.name);
        let checked = import(&f.name, &f.xml).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            entry.constraints.count_unit,
            unit_of(&checked),
            "{}",
            f.name
        );
        let need = checked.algo.nchannels * checked.depth;
        assert!(
            need <= LINK_CHANNELS,
            "{} needs {need} link channels",
            f.name
        );
    }
}

// --- the analyzer -------------------------------------------------------------------------

/// How a matrix case is recorded: through select_alg with the executor forced, or with an
/// executor that is not registered.
type Record<'a> = &'a dyn Fn(&[OpParam], bool, Config) -> Result<Recording, Error>;

/// Record through select_alg with `kind`'s executor `name` forced, as a communicator does.
fn registered(
    kind: OpKind,
    name: &'static str,
) -> impl Fn(&[OpParam], bool, Config) -> Result<Recording, Error> {
    move |ops, in_place, mut config| {
        config.algo.set(Some(kind), name);
        Recording::record_each(ops, in_place, config)
    }
}

/// The analyzer's matrix ([`unit_cases`] on every shape of [`shapes`] with the file's
/// rank count that its links admit), the cases `keep` accepts, every rooted case at
/// `root`, recorded by `record`: what [`conformance`] does (at an executor's declared
/// root, `Constraints::root`), for a subset of the cases, or for an executor that is not
/// registered.
fn matrix(
    file: &Imported,
    root: Option<usize>,
    base: &Config,
    keep: &dyn Fn(&conformance::Case) -> bool,
    record: Record<'_>,
) -> Matrix {
    let kind = file.algo.coll;
    let ranks = file.algo.ngpus;
    let (unit, fixed) = (file.unit(), file.links());
    let mut out = Outcome::default();
    let mut fired = BTreeSet::new();
    let mut passed_with_data = 0;
    for topo in shapes() {
        if topo.ranks() != ranks {
            continue;
        }
        if fixed.iter().any(|&(a, b)| topo.link_kind(a, b).is_none()) {
            out.skipped_shapes += 1;
            continue;
        }
        let config = Config {
            topology: Some(topo.clone()),
            ..base.clone()
        };
        for case in unit_cases(kind, ranks, config.ccl_buffer_bytes, unit) {
            if !keep(&case) {
                continue;
            }
            out.cases += 1;
            let ops: Vec<OpParam> = case
                .ops
                .iter()
                .map(|op| OpParam {
                    root: root.or(op.root),
                    ..op.clone()
                })
                .collect();
            let config = Config {
                zero_copy: case.zero_copy,
                ..config.clone()
            };
            let what = format!(
                "{:?} {} count {} {} in_place={} zero_copy={}",
                topo.server_sizes(),
                ops[0].dtype,
                ops[0].count,
                ops[0].op,
                case.in_place,
                case.zero_copy
            );
            match record(&ops, case.in_place, config) {
                Err(Error::Unsupported { .. }) => out.refused += 1,
                Err(e) => {
                    out.failures += 1;
                    out.first_failure.get_or_insert(format!("{what}: {e}"));
                }
                Ok(rec) => {
                    let report = analyze(&rec);
                    match report.failures.first() {
                        Some(f) => {
                            out.failures += 1;
                            out.first_failure.get_or_insert(format!("{what}: {f}"));
                            fired.extend(report.failures.iter().map(|f| f.check));
                        }
                        None if ops[0].count > 0 => passed_with_data += 1,
                        None => {}
                    }
                }
            }
        }
    }
    Matrix {
        outcome: out,
        fired,
        passed_with_data,
    }
}

/// What [`matrix`] found.
struct Matrix {
    outcome: Outcome,
    /// The checks that failed, over every case.
    fired: BTreeSet<Check>,
    /// Cases that moved data (count above 0) and passed.
    passed_with_data: usize,
}

/// `file` as the executor the registry makes of it, named `name`.
fn imported(file: &Checked, name: &str) -> Arc<Imported> {
    Arc::new(Imported {
        name: Box::leak(name.to_string().into_boxed_str()),
        algo: file.algo.clone(),
        wiring: file.wiring.clone(),
        depth: file.depth,
    })
}

/// The base of every analyzer run: the defaults, with [`LINK_CHANNELS`].
fn analyzer_base() -> Config {
    Config {
        link_channels: LINK_CHANNELS,
        ..Config::default()
    }
}

/// Each file over the analyzer's matrix: `conformance` itself for the collectives without
/// a root, the same matrix at the file's root for the rooted ones; with `in_place_only`,
/// the in-place cases alone, at every file's root. No failure, and some cases ran beyond
/// the refused ones (counts off the unit, the form the file does not run). Returns the
/// files that failed, with their outcome.
fn conformance_of(files: &[GenFile], base: &Config, in_place_only: bool) -> Vec<String> {
    let registry = oxccl::registry().expect("registry");
    let mut failed = Vec::new();
    for f in files {
        let start = Instant::now();
        let file = File::of(f);
        let entry = registry.executor(file.kind, file.name).unwrap();
        let out = if file.root.is_none() && !in_place_only {
            conformance(entry, base)
        } else {
            let checked = import(&f.name, &f.xml).unwrap();
            let keep = |case: &conformance::Case| case.in_place || !in_place_only;
            let record = registered(file.kind, file.name);
            matrix(
                &imported(&checked, file.name),
                file.root,
                base,
                &keep,
                &record,
            )
            .outcome
        };
        eprintln!(
            "{}: {} cases, {} refused, {} failed, {} shapes skipped, in {:?}",
            f.name,
            out.cases,
            out.refused,
            out.failures,
            out.skipped_shapes,
            start.elapsed()
        );
        if out.failures > 0 || out.cases <= out.refused {
            failed.push(format!("{}: {out:?}", f.name));
        }
    }
    failed
}

#[test]
fn every_file_conforms() {
    loaded();
    let failed = conformance_of(&correct_files(), &analyzer_base(), false);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

// --- the host device ----------------------------------------------------------------------

/// The counts a file runs on the host: 0, one unit, an odd number of units, and the
/// first multiple of the unit whose largest buffer holds more than three CCL buffers.
fn counts(file: &File, dtype: DataType) -> [usize; 4] {
    let (i, o) = file.kind.buffer_counts(1, file.ranks);
    let per_count = i.max(o) * dtype.size();
    let big = (3 * CCL_BYTES / per_count).div_ceil(file.unit) + 1;
    [0, file.unit, 7 * file.unit, big * file.unit]
}

/// The cases of `file` in the `mode`th of [`modes`], in place or out of place. Full:
/// every dtype x reduce op x count. Thinned: every dtype once, the count and the reduce
/// op rotating (each count and each op runs with three dtypes in each mode).
fn host_cases(file: &File, full: bool, mode: usize, in_place: bool) -> Vec<Case> {
    let ops: &[ReduceOp] = if file.kind.reduces() {
        &ReduceOp::ALL
    } else {
        &[ReduceOp::Sum]
    };
    let mut cases = Vec::new();
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        let counts = counts(file, dtype);
        for (j, &count) in counts.iter().enumerate() {
            for (k, &op) in ops.iter().enumerate() {
                let rotation = j == (i + mode) % counts.len() && k == (i / 4 + j) % ops.len();
                if full || rotation {
                    cases.push(Case {
                        dtype,
                        op,
                        count,
                        in_place,
                    });
                }
            }
        }
    }
    cases
}

/// How the host runs bind buffers and what links they have.
#[derive(Clone, Debug)]
struct Mode {
    zero_copy: bool,
    /// `None`: the device's own machine (load/store links).
    topology: Option<Topology>,
}

/// The modes of the host runs: zero-copy and staged on the device's machine, and
/// zero-copy asked for over put-only links (2+2 servers joined by RoCE, `tcp8`, `2x8`),
/// which stage.
fn modes(ranks: usize) -> [Mode; 3] {
    let put_only = match ranks {
        4 => Topology::servers(vec![2, 2]).expect("valid shape"),
        8 => Topology::parse_spec("tcp8").expect("preset"),
        16 => Topology::parse_spec("2x8").expect("preset"),
        n => panic!("no put-only shape of {n} ranks"),
    };
    assert!(!put_only.all_load_store());
    [
        Mode {
            zero_copy: true,
            topology: None,
        },
        Mode {
            zero_copy: false,
            topology: None,
        },
        Mode {
            zero_copy: true,
            topology: Some(put_only),
        },
    ]
}

/// A communicator of `file`'s ranks on the test device with `file` forced.
fn communicators(file: &File, mode: &Mode, link_channels: usize) -> Vec<Communicator> {
    let mut config = Config {
        ccl_buffer_bytes: CCL_BYTES,
        zero_copy: mode.zero_copy,
        topology: mode.topology.clone(),
        link_channels,
        exec_timeout: Duration::from_secs(30),
        device: test_device(),
        ..Config::default()
    };
    config.algo.set(Some(file.kind), file.name);
    Communicator::init_all(file.ranks, config)
        .unwrap_or_else(|e| panic!("{}: init: {e}", file.name))
}

/// Run `cases` of `file` on `comms`, comparing every defined output with the reference.
fn run_cases(file: &File, comms: &[Communicator], cases: &[Case]) -> Result<(), String> {
    match file.kind {
        OpKind::AllReduce => all_reduce_on(comms, cases),
        OpKind::AllGather | OpKind::ReduceScatter => blocks::blocks_on(file.kind, comms, cases),
        OpKind::AlltoAll => oxccl_tests::all_to_all::all_to_all_cases_on(comms, cases),
        kind => rooted::rooted_at(kind, comms, file.root.expect("rooted"), cases),
    }
}

/// `param` on every rank at once with buffers of the right sizes; every rank's result.
fn execute_everywhere(
    comms: &[Communicator],
    param: &OpParam,
    in_place: bool,
) -> Vec<Result<(), Error>> {
    let n = comms.len();
    let (i, o) = param.kind.buffer_counts(param.count, n);
    let es = param.dtype.size();
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|comm| {
                s.spawn(move || {
                    let input = Aligned::from_bytes(&vec![0; i * es]);
                    let mut output = Aligned::from_bytes(&vec![0; i.max(o) * es]);
                    let user = if in_place {
                        UserBuffers::InPlace(output.bytes_mut())
                    } else {
                        UserBuffers::OutOfPlace {
                            input: input.bytes(),
                            output: &mut output.bytes_mut()[..o * es],
                        }
                    };
                    comm.execute(param, user)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// Every rank refuses `param` with [`Error::Unsupported`], saying `why`.
fn refused(
    comms: &[Communicator],
    param: &OpParam,
    in_place: bool,
    why: &str,
) -> Result<(), String> {
    let results = execute_everywhere(comms, param, in_place);
    for (rank, result) in results.into_iter().enumerate() {
        match result {
            Err(Error::Unsupported { reason, .. }) if reason.contains(why) => {}
            other => {
                return Err(format!(
                    "rank {rank}: {param:?} in_place={in_place}: want a refusal saying \
                     {why:?}, got {other:?}"
                ))
            }
        }
    }
    Ok(())
}

/// Every file of `files` on the host device in each of [`modes`]: the cases of
/// [`host_cases`] in the form `in_place` says (which the files must run), then a count
/// off the unit and the form the file does not run, each refused, then the first case
/// again. Returns the failures, one per file at most.
fn host_runs(files: &[GenFile], full: bool, in_place: bool) -> Vec<String> {
    let mut failed = Vec::new();
    for f in files {
        let start = Instant::now();
        let file = File::of(f);
        let mut calls = 0;
        let outcome = (|| -> Result<(), String> {
            for (m, mode) in modes(file.ranks).iter().enumerate() {
                let comms = communicators(&file, mode, LINK_CHANNELS);
                let cases = host_cases(&file, full, m, in_place);
                calls += cases.len();
                run_cases(&file, &comms, &cases).map_err(|e| format!("{mode:?}: {e}"))?;
                if file.unit > 1 {
                    let param = file.op(DataType::F32, ReduceOp::Sum, file.unit + 1);
                    refused(&comms, &param, in_place, "multiples of")?;
                }
                let param = file.op(DataType::F32, ReduceOp::Sum, file.unit);
                if !file.in_place && file.kind != OpKind::AlltoAll {
                    refused(&comms, &param, true, "inplace=\"0\"")?;
                }
                if !file.out_of_place {
                    refused(&comms, &param, false, "outofplace=\"0\"")?;
                }
                run_cases(&file, &comms, &cases[..1])
                    .map_err(|e| format!("{mode:?}, after the refusals: {e}"))?;
            }
            Ok(())
        })();
        eprintln!("{}: {calls} calls in {:?}", f.name, start.elapsed());
        if let Err(e) = outcome {
            failed.push(format!("{}: {e}", f.name));
        }
    }
    failed
}

fn files_of(ranks: usize) -> Vec<GenFile> {
    correct_files()
        .into_iter()
        .filter(|f| f.ranks == ranks)
        .collect()
}

#[test]
fn files_of_4_ranks_on_the_host() {
    loaded();
    let failed = host_runs(&files_of(4), false, false);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn files_of_8_ranks_on_the_host() {
    loaded();
    let failed = host_runs(&files_of(8), false, false);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn files_of_16_ranks_on_the_host() {
    loaded();
    let failed = host_runs(&files_of(16), false, false);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

// --- in place -----------------------------------------------------------------------------

/// The in-place variants run in place: the analyzer's in-place cases, and the host in
/// every mode (RCCL's in-place-only files refuse the out-of-place form). Those that copy
/// a block onto itself in place are `in_place_self_copies`'.
#[test]
fn in_place_variants_run_in_place() {
    loaded();
    let (files, self_copies) = in_place_variants_split();
    assert_eq!(files.len() + self_copies.len(), 48);
    let mut failed = conformance_of(&files, &analyzer_base(), true);
    failed.extend(host_runs(&files, false, true));
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The in-place variants whose schedule copies a rank's own block to where the one buffer
/// already holds it (the rings and hierarchical files of AllGather, the rings of
/// Broadcast, Gather and Scatter; they say `outofplace="1"` too). MSCCL runs such a copy
/// as a no-op, and so does the importer when the call binds input and output as one: the
/// device is never handed a copy whose source and destination are the same bytes.
#[test]
fn in_place_self_copies() {
    loaded();
    let (_, files) = in_place_variants_split();
    assert_eq!(files.len(), 15);
    let mut failed = conformance_of(&files, &analyzer_base(), true);
    failed.extend(host_runs(&files, false, true));
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Every file (and in-place variant) on the host with every dtype x reduce op x count in
/// every mode, and the analyzer's matrix again, with small CCL buffers too.
#[test]
#[ignore = "the full matrix: a minute or two on two cores; the default run covers every file \
            with a rotation"]
fn every_file_full_matrix() {
    loaded();
    let start = Instant::now();
    let (in_place, _) = in_place_variants_split();
    // Small CCL buffers: many iterations, the last one shorter.
    let small = Config {
        ccl_buffer_bytes: CCL_BYTES,
        ..analyzer_base()
    };
    let mut failed = conformance_of(&correct_files(), &analyzer_base(), false);
    failed.extend(conformance_of(&correct_files(), &small, false));
    failed.extend(conformance_of(&in_place, &small, true));
    failed.extend(host_runs(&correct_files(), true, false));
    failed.extend(host_runs(&in_place, true, true));
    eprintln!("full matrix in {:?}", start.elapsed());
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

// --- link channels ------------------------------------------------------------------------

/// A file whose schedule needs more message slots than the default two link channels
/// give is refused, saying what to set; with one fewer than it needs too; with exactly
/// what it needs it runs.
#[test]
fn too_few_link_channels_are_refused_with_what_to_set() {
    loaded();
    let f = correct_files()
        .into_iter()
        .find(|f| f.name == "all_reduce-ring-8.xml")
        .unwrap();
    let checked = import(&f.name, &f.xml).unwrap();
    let need = checked.algo.nchannels * checked.depth;
    let default = Config::default().link_channels;
    assert!(need > default, "{} needs {need}", f.name);
    let file = File::of(&f);
    let param = file.op(DataType::F32, ReduceOp::Sum, 3 * file.unit);
    let [zero_copy, staged, _] = modes(file.ranks);
    let comms = communicators(&file, &zero_copy, default);
    let results = execute_everywhere(&comms, &param, false);
    for (rank, result) in results.iter().enumerate() {
        match result {
            Err(Error::Unsupported { reason, .. }) => assert!(
                reason.contains(&format!("set OXCCL_LINK_CHANNELS to at least {need}")),
                "rank {rank}: {reason}"
            ),
            other => panic!("rank {rank}: want a refusal, got {other:?}"),
        }
    }
    drop(comms);
    let comms = communicators(&file, &zero_copy, need - 1);
    refused(&comms, &param, false, "OXCCL_LINK_CHANNELS").unwrap();
    drop(comms);
    let comms = communicators(&file, &staged, need);
    run_cases(&file, &comms, &host_cases(&file, false, 1, false)).unwrap();
}

// --- broken files -------------------------------------------------------------------------

/// The 1-based line of the element a place names: the `<gpu>` with id `gpu`, its `<tb>`
/// with id `tb`, that one's `<step>` with `s` = `step`.
fn line_of_element(xml: &str, gpu: usize, tb: Option<usize>, step: Option<usize>) -> usize {
    let mut in_gpu = false;
    let mut in_tb = false;
    for (i, line) in xml.lines().enumerate() {
        let line = line.trim_start();
        if line.starts_with("<gpu ") {
            in_gpu = line.starts_with(&format!("<gpu id=\"{gpu}\""));
            in_tb = false;
            if in_gpu && tb.is_none() {
                return i + 1;
            }
        } else if in_gpu && line.starts_with("<tb ") {
            in_tb = tb.is_some_and(|t| line.starts_with(&format!("<tb id=\"{t}\"")));
            if in_tb && step.is_none() {
                return i + 1;
            }
        } else if in_tb && step.is_some_and(|s| line.starts_with(&format!("<step s=\"{s}\""))) {
            return i + 1;
        }
    }
    panic!("gpu {gpu} tb {tb:?} step {step:?} is not in the file")
}

/// The line a rejected file's error must name: the mismatched closing tag, the `<algo>`
/// element, the step of the unknown type, or else the element (gpu, threadblock, step) the
/// error names.
fn expected_line(f: &GenFile, place: &Place) -> usize {
    let line_with = |needle: &str| {
        f.xml
            .lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} is not in {}", f.name))
            + 1
    };
    match f.verdict {
        Verdict::Rejected("malformed") => line_with("</threadblock>"),
        Verdict::Rejected("ngpus") => line_with("<algo "),
        Verdict::Rejected("unknown step type") => line_with("type=\"xfer\""),
        Verdict::Rejected("outside") => line_of_element(&f.xml, 0, Some(0), Some(0)),
        _ => {
            let gpu = place
                .gpu
                .unwrap_or_else(|| panic!("{}: {place:?} names no gpu", f.name));
            line_of_element(&f.xml, gpu, place.tb, place.step)
        }
    }
}

#[test]
fn rejected_files_name_the_file_the_line_and_the_rule() {
    let loaded = loaded();
    assert_eq!(loaded.rejected.len(), 8);
    for (f, path, err) in &loaded.rejected {
        let Verdict::Rejected(keyword) = f.verdict else {
            unreachable!()
        };
        assert!(err.contains(keyword), "{}: {err}", f.name);
        // `import` of the text alone says the same, naming the file as it is told to.
        let direct = import(&f.name, &f.xml).expect_err(&f.name);
        let message = direct.to_string();
        assert!(message.contains(keyword), "{message}");
        let line = expected_line(f, &direct.place);
        assert!(
            message.starts_with(&format!("{}:{line}:", f.name)),
            "{}: want line {line}: {message}",
            f.name
        );
        assert_eq!(direct.place.line, Some(line as u32), "{message}");
        assert!(
            err.contains(&format!("{}:{line}:", path.display())),
            "{}: {err}",
            f.name
        );
    }
    // None of them was registered.
    let registry = oxccl::registry().expect("registry");
    for e in registry.executors() {
        if let Some(file) = e.file {
            assert!(
                !file.path.contains("broken-"),
                "{} is registered",
                file.path
            );
        }
    }
}

/// The check of the analyzer that catches each well-formed but wrong file (by the
/// keyword of its verdict), and what its message says.
fn catching_check(keyword: &str) -> (Check, &'static str) {
    match keyword {
        // Gpu 0 sends its input chunk 1 where chunk 0 belongs.
        "wrong result" => (Check::Semantics, "wrong offset"),
        // The last `re` on gpu 0 reads a scratch slot its receive may still be writing.
        "race" => (Check::MemoryConflict, "no happens-before order"),
        // The last `re` on gpu 0 adds a slot already added.
        "double-counted" => (Check::Semantics, "duplicated contributions"),
        other => panic!("no check for {other}"),
    }
}

/// The well-formed but wrong files import (from their files, as `add_algo_files` reads
/// them), and their executors, recorded without the registry, fail the analyzer in every
/// case that moves data, by the one check that catches each.
#[test]
fn wrong_files_import_and_fail_the_analyzer() {
    let loaded = loaded();
    let mut seen = 0;
    for f in broken_files() {
        let Verdict::Wrong(keyword) = f.verdict else {
            continue;
        };
        seen += 1;
        let checked = import_file(loaded.path(&f.name)).unwrap_or_else(|e| panic!("{e}"));
        let file = imported(&checked, &format!("unregistered-{}", algo_name(&f)));
        assert_eq!(file.unit(), unit_of(&checked));
        let executor = FileExecutor(file.clone());
        let record = |ops: &[OpParam], in_place: bool, config: Config| {
            let topology = config.topology.as_ref().expect("a shape");
            let setting = Setting {
                topology,
                mode: mode_for(config.zero_copy, topology),
                ccl_bytes: config.ccl_buffer_bytes,
                link_channels: config.link_channels,
                in_place,
            };
            // In the mode the file would run in: imports declare `LinkNeed::Put`.
            let setting = setting.for_links(LinkNeed::Put);
            record_every_rank(file.name, &executor, "forced".into(), ops, &setting)
        };
        let found = matrix(&file, None, &analyzer_base(), &|_| true, &record);
        let out = &found.outcome;
        eprintln!("{}: {out:?}, checks {:?}", f.name, found.fired);
        assert!(out.failures > 0, "{}: {out:?}", f.name);
        assert_eq!(found.passed_with_data, 0, "{}: {out:?}", f.name);
        let (check, says) = catching_check(keyword);
        assert_eq!(found.fired, BTreeSet::from([check]), "{}", f.name);
        let first = out.first_failure.as_deref().unwrap_or_default();
        assert!(
            first.contains(&format!("[{check:?}]")) && first.contains(says),
            "{}: {first}",
            f.name
        );
    }
    assert_eq!(seen, 3);
}

// --- the big file -------------------------------------------------------------------------

/// The big file imports (the time is printed, not asserted) and the analyzer proves it at
/// one count, with the link channels it needs (12 channels, so 24 at least).
#[test]
fn big_file_imports_and_is_proved() {
    let loaded = loaded();
    let f = big_file();
    eprintln!(
        "{}: {} bytes imported in {:?}",
        f.name,
        f.xml.len(),
        loaded.big_import
    );
    let file = File::of(&f);
    let checked = import(&f.name, &f.xml).unwrap();
    assert!(checked.algo.gpus.iter().all(|g| g.tbs.len() == 24));
    let need = checked.algo.nchannels * checked.depth;
    let mut config = Config {
        topology: Some(Topology::single_server(16)),
        link_channels: need,
        zero_copy: true,
        ..Config::default()
    };
    config.algo.set(Some(file.kind), file.name);
    let op = file.op(DataType::F32, ReduceOp::Sum, 7 * file.unit);
    let start = Instant::now();
    let rec = Recording::record(&op, false, config).unwrap_or_else(|e| panic!("{e}"));
    let recorded = start.elapsed();
    let start = Instant::now();
    let report = analyze(&rec);
    eprintln!(
        "{}: count {} ({} link channels) recorded in {recorded:?}, {} tasks analysed in {:?}",
        f.name,
        op.count,
        need,
        report.tasks,
        start.elapsed()
    );
    assert!(report.passed(), "{:?}", report.failures.first());
}
