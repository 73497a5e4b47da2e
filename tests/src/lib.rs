//! # oxccl-tests
//!
//! Cross-crate integration and conformance tests. This library holds the harness the test
//! files share: inputs whose reductions are exact ([`data`]), a scalar reference written
//! independently of the kernels ([`oracle`]), and [`run_all_reduce`], which runs a list of
//! cases on every rank of a communicator and compares every output byte; [`blocks`] does
//! the same for AllGather and ReduceScatter.

pub mod all_to_all;
pub mod barrier;
pub mod blocks;
pub mod data;
pub mod every;
pub mod msccl;
pub mod oracle;
pub mod puts;
pub mod rooted;
pub mod staged_host;
pub mod vector;

use std::sync::Arc;

use oxccl::platform::LinkAccess;
use oxccl::{Communicator, Config, DataType, OpParam, ReduceOp, Topology, UserBuffers};

// The example plugin must be linked for its executor to be registered.
use oxccl_plugin_bidir_ring as _;

/// The launchers' variables (and those that configure a job) a test run may have
/// inherited, for example when the suite itself runs under mpirun or Slurm: the
/// multi-process tests remove them, so that each child sees only the launch its test
/// gives it.
pub const INHERITED_LAUNCH_VARS: [&str; 11] = [
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "OXCCL_COMM_ID",
    "OXCCL_TEST_RANKS",
    "OXCCL_TOPO_FILE",
    "OXCCL_TUNE_FILE",
    "OXCCL_BUFFSIZE",
];

/// One collective call to check.
#[derive(Copy, Clone, Debug)]
pub struct Case {
    pub dtype: DataType,
    pub op: ReduceOp,
    pub count: usize,
    pub in_place: bool,
}

/// How the communicator under test is built.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Executor forced for AllReduce (`None`: whatever select_alg picks).
    pub algo: Option<&'static str>,
    pub topology: Topology,
    /// Zero-copy on user buffers (true) or staged through the CCL buffers (false).
    pub zero_copy: bool,
    /// Bytes of each CCL buffer; small values make the staged loop run several times.
    pub ccl_bytes: usize,
    /// The backend (`None`: [`test_device`], which `OXCCL_TEST_DEVICE` sets). A test that
    /// needs one names it here rather than setting the variable, which other threads of
    /// the test binary (and the CUDA driver) read.
    pub device: Option<&'static str>,
}

impl Setup {
    /// Run `on` over the ranks of a fresh in-process communicator of this setup's
    /// topology, configured with `config`; a failure is prefixed with `label` and the
    /// setup that produced it.
    pub fn run_with(
        &self,
        label: &str,
        config: Config,
        on: impl FnOnce(&[Communicator]) -> Result<(), String>,
    ) -> Result<(), String> {
        let n = self.topology.ranks();
        let comms =
            Communicator::init_all(n, config).map_err(|e| format!("{self:?}: init: {e}"))?;
        on(&comms).map_err(|e| {
            format!(
                "{label}{:?} on {n} ranks {:?} (broken {:?}), zero_copy={}, {e}",
                self.algo,
                self.topology.server_sizes(),
                self.topology.broken_links().collect::<Vec<_>>(),
                self.zero_copy
            )
        })
    }

    /// The communicator configuration for this setup (`algo` forced for AllReduce).
    pub fn config(&self) -> Config {
        self.config_for(oxccl::OpKind::AllReduce)
    }

    /// The communicator configuration for this setup, `algo` forced for `kind`.
    pub fn config_for(&self, kind: oxccl::OpKind) -> Config {
        let mut config = Config {
            ccl_buffer_bytes: self.ccl_bytes,
            zero_copy: self.zero_copy,
            topology: Some(self.topology.clone()),
            exec_timeout: std::time::Duration::from_secs(30),
            device: self.device.map_or_else(test_device, str::to_string),
            ..Config::default()
        };
        if let Some(algo) = self.algo {
            config.algo.set(Some(kind), algo);
        }
        config
    }
}

/// A job of `n` ranks joined with `Communicator::init_rank`, each from a thread of its
/// own (standing for a process: each rank gets a device and transports of its own), rank
/// `r` configured with `config(r)`; every rank's outcome, by rank.
pub fn join_ranks(
    n: usize,
    config: impl Fn(usize) -> Config,
) -> Vec<Result<Communicator, oxccl::Error>> {
    let id = oxccl::UniqueId::create(n, std::time::Duration::from_secs(60)).expect("root");
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..n)
            .map(|r| {
                let (id, config) = (&id, config(r));
                s.spawn(move || Communicator::init_rank(id, n, r, config))
            })
            .collect();
        joins
            .into_iter()
            .map(|j| j.join().expect("a joining thread"))
            .collect()
    })
}

/// The backend the executor tests run on: `OXCCL_TEST_DEVICE` (`cuda` runs every
/// executor test on the GPU, as virtual ranks of GPU 0 unless `OXCCL_CUDA_DEVICES` places
/// them; `staged-host` binds every call as device spans staged through host memory, see
/// [`staged_host`]), else the host device.
pub fn test_device() -> String {
    std::env::var("OXCCL_TEST_DEVICE").unwrap_or_else(|_| "host".into())
}

/// A byte buffer aligned for every element type. It reads as a byte slice; its words
/// come zeroed from the allocator, so a large buffer costs pages only as they are written.
#[derive(Clone)]
pub struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        Aligned {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// `len` bytes, each `byte`.
    pub fn filled(byte: u8, len: usize) -> Self {
        let mut a = Aligned::zeroed(len);
        if byte != 0 {
            a.bytes_mut().fill(byte);
        }
        a
    }

    /// A copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut a = Aligned::zeroed(bytes.len());
        a.bytes_mut().copy_from_slice(bytes);
        a
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

impl std::ops::Deref for Aligned {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes_mut()
    }
}

impl std::borrow::Borrow<[u8]> for Aligned {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

/// The small element counts every executor is checked with: 0, 1, odd, not divisible by
/// the rank count, and a few thousand.
pub fn boundary_counts(ranks: usize) -> Vec<usize> {
    vec![0, 1, 7, 3 * ranks + 1, 4099]
}

/// Ranks above which the matrices are thinned further (see [`op_variants`]) and shapes run
/// in one mode only: a 32-rank case costs 32 threads on the host device.
pub const THIN_ABOVE_RANKS: usize = 9;

/// Rank counts that get the full cross product of dtype x op x count x in-place (an odd
/// count, and a power of two, which includes the 2x2 shape); every other shape gets each
/// dtype x count once, rotating through the ops and alternating in place, so that every
/// dtype, op, count and form is still checked on every shape, only not every combination
/// (which would cost the test suite its time budget; the analyzer's conformance matrix
/// covers every combination on every shape symbolically).
pub const FULL_MATRIX_RANKS: [usize; 2] = [3, 4];

/// The `(op, in_place)` pairs to check for one dtype (index `i`) and count (index `j`):
/// every op, in and out of place, on [`FULL_MATRIX_RANKS`]; otherwise one rotating pair,
/// for half the dtypes (those whose index has the parity of the rank count, so that every
/// dtype runs on every other rank count, single- and multi-server), and above
/// [`THIN_ABOVE_RANKS`] only for every third (dtype, count) pair (each dtype keeps at least
/// one count besides its larger-than-the-buffer case).
pub fn op_variants(ops: &[ReduceOp], ranks: usize, i: usize, j: usize) -> Vec<(ReduceOp, bool)> {
    if ranks > THIN_ABOVE_RANKS && !(i + j).is_multiple_of(3) {
        return Vec::new();
    }
    if !FULL_MATRIX_RANKS.contains(&ranks) {
        if ranks <= THIN_ABOVE_RANKS && !(i + ranks).is_multiple_of(2) {
            return Vec::new();
        }
        return vec![(ops[(i + j) % ops.len()], (i + j) % 2 == 1)];
    }
    ops.iter()
        .flat_map(|&op| [(op, false), (op, true)])
        .collect()
}

/// Whether dtype `i` (of [`DataType::ALL`]) gets a case larger than the CCL buffer on
/// `ranks` ranks: every dtype on [`FULL_MATRIX_RANKS`], the dtypes [`op_variants`] keeps
/// on the other shapes up to [`THIN_ABOVE_RANKS`], every fourth above (each such case
/// moves megabytes per rank through 12 to 32 threads).
pub fn crosses_buffer(ranks: usize, i: usize) -> bool {
    match ranks {
        r if FULL_MATRIX_RANKS.contains(&r) => true,
        r if r <= THIN_ABOVE_RANKS => (i + r).is_multiple_of(2),
        _ => i.is_multiple_of(4),
    }
}

/// Every dtype x op x boundary count, out-of-place and in place (see [`op_variants`]); plus,
/// per dtype ([`crosses_buffer`]), one count larger than the CCL buffer (so the staged loop runs twice), rotating through the reduce
/// ops and alternating in-place, so that every dtype and every op crosses the buffer.
pub fn full_matrix(ranks: usize, ccl_bytes: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        for (j, count) in boundary_counts(ranks).into_iter().enumerate() {
            for (op, in_place) in op_variants(&ReduceOp::ALL, ranks, i, j) {
                cases.push(Case {
                    dtype,
                    op,
                    count,
                    in_place,
                });
            }
        }
        if !crosses_buffer(ranks, i) {
            continue;
        }
        let big = ccl_bytes / dtype.size() + 37;
        cases.push(Case {
            dtype,
            op: ReduceOp::ALL[i % 4],
            count: big,
            in_place: i % 2 == 1,
        });
    }
    cases
}

/// The first element (of `es` bytes) where `got` and `want` differ; a length difference
/// counts as one at the shorter's end.
pub(crate) fn first_difference(got: &[u8], want: &[u8], es: usize) -> Option<usize> {
    // One comparison of the whole buffers first: equal is the usual answer, and a
    // comparison per element was much of the time the suites spent checking.
    if got == want {
        return None;
    }
    if got.len() != want.len() {
        return Some(got.len().min(want.len()) / es);
    }
    got.chunks(es)
        .zip(want.chunks(es))
        .position(|(a, b)| a != b)
}

/// Each rank's buffers before the call and the bytes its output must hold after it. The
/// buffers move into the rank's thread and are run on as they are (no copy per call); the
/// expected bytes are shared, since many ranks often expect the same.
pub struct RankData {
    pub input: Aligned,
    /// The in-place buffer, or the output buffer's initial bytes.
    pub start: Aligned,
    /// What the output must hold after the call; `None`: anything (a non-root's output).
    pub expected: Option<Arc<[u8]>>,
}

impl RankData {
    /// Each rank's input with its (start, expected) buffers, by rank.
    pub fn zip(inputs: Vec<Aligned>, buffers: Vec<(Aligned, Option<Arc<[u8]>>)>) -> Vec<Self> {
        inputs
            .into_iter()
            .zip(buffers)
            .map(|(input, (start, expected))| RankData {
                input,
                start,
                expected,
            })
            .collect()
    }
}

/// Run `check` for every rank of `comms` at once, one thread per rank, each given its own
/// entry of `data` (indexed by rank: `comms` may be the ranks of this process only); the
/// first failure.
pub fn on_every_rank<D: Send>(
    comms: &[Communicator],
    data: Vec<D>,
    check: impl Fn(&Communicator, D) -> Result<(), String> + Sync,
) -> Result<(), String> {
    let mut data: Vec<Option<D>> = data.into_iter().map(Some).collect();
    let check = &check;
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|comm| {
                let d = data[comm.rank()].take().expect("one entry per rank");
                s.spawn(move || check(comm, d))
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("rank thread panicked"))
    })
}

/// Run `param` on `comm` over `input` and `out` (`out` alone when `in_place`): bound as
/// device spans on the `staged-host` kind ([`staged_host`]). In a job
/// whose peers map user buffers (`OXCCL_SHARED_BUFFERS=1`), which refuses other memory,
/// through copies in buffers from `alloc_shared` (a collective allocation, which every
/// rank makes at the same call).
pub fn execute_on(
    comm: &Communicator,
    param: &OpParam,
    in_place: bool,
    input: &Aligned,
    out: &mut Aligned,
) -> Result<(), String> {
    let failed = |e: oxccl::Error| {
        format!(
            "rank {}: {}",
            comm.rank(),
            oxccl::framework::error::with_causes(&e)
        )
    };
    if staged_host::runs_staged(comm) {
        let user = staged_host::device_binding(in_place, input.bytes(), out.bytes_mut());
        return comm.execute(param, user).map_err(failed);
    }
    if !comm.framework().config().shared_buffers {
        let user = binding(in_place, input.bytes(), out.bytes_mut());
        return comm.execute(param, user).map_err(failed);
    }
    let mut send = comm.alloc_shared::<u8>(input.len()).map_err(failed)?;
    let mut recv = comm.alloc_shared::<u8>(out.len()).map_err(failed)?;
    send.copy_from_slice(input.bytes());
    recv.copy_from_slice(out.bytes());
    comm.execute(param, binding(in_place, &send, &mut recv))
        .map_err(failed)?;
    out.bytes_mut().copy_from_slice(&recv);
    Ok(())
}

/// `input` and `out` as a call's buffers (`out` alone when `in_place`).
fn binding<'a>(in_place: bool, input: &'a [u8], out: &'a mut [u8]) -> UserBuffers<'a> {
    match in_place {
        true => UserBuffers::InPlace(out),
        false => UserBuffers::OutOfPlace { input, output: out },
    }
}

/// Run `param` on every rank of `comms` at once (one thread per rank) and compare every
/// output byte with its rank's expected bytes (`data` is indexed by rank: `comms` may be
/// the ranks of this process only); the first difference, naming rank and element.
pub fn run_on_every_rank(
    comms: &[Communicator],
    param: &OpParam,
    in_place: bool,
    data: Vec<RankData>,
) -> Result<(), String> {
    let es = param.dtype.size();
    on_every_rank(comms, data, |comm, mut d| {
        execute_on(comm, param, in_place, &d.input, &mut d.start)?;
        let (got, Some(want)) = (d.start.bytes(), &d.expected) else {
            return Ok(());
        };
        match first_difference(got, want, es) {
            None => Ok(()),
            Some(i) => Err(format!(
                "rank {} element {i}: got {:?}, want {:?}",
                comm.rank(),
                got.get(i * es..(i + 1) * es),
                want.get(i * es..(i + 1) * es)
            )),
        }
    })
}

/// Run one AllReduce case on every rank and compare with the scalar reference.
fn run_case(comms: &[Communicator], case: &Case, seed: u64) -> Result<(), String> {
    let inputs: Vec<Aligned> = (0..comms[0].size())
        .map(|r| data::input(case.dtype, case.op, r, case.count, seed))
        .collect();
    let refs: Vec<&[u8]> = inputs.iter().map(Aligned::bytes).collect();
    let expected: Arc<[u8]> = oracle::fold(case.dtype, case.op, &refs).into();
    let data: Vec<RankData> = inputs
        .into_iter()
        .map(|input| RankData {
            start: match case.in_place {
                true => input.clone(),
                false => Aligned::filled(0xEE, input.len()),
            },
            input,
            expected: Some(expected.clone()),
        })
        .collect();
    run_on_every_rank(
        comms,
        &OpParam::all_reduce(case.count, case.dtype, case.op),
        case.in_place,
        data,
    )
}

/// Run `cases` in order on a fresh communicator built from `setup`; the first failure, with
/// the setup and case that produced it.
pub fn run_all_reduce(setup: &Setup, cases: &[Case]) -> Result<(), String> {
    setup.run_with("", setup.config(), |comms| all_reduce_on(comms, cases))
}

/// Run AllReduce `cases` in order on the ranks `comms` (all of a communicator's, or this
/// process's); the first failure, with its case.
pub fn all_reduce_on(comms: &[Communicator], cases: &[Case]) -> Result<(), String> {
    for (i, case) in cases.iter().enumerate() {
        run_case(comms, case, i as u64).map_err(|e| format!("{case:?}: {e}"))?;
    }
    Ok(())
}

/// The topologies every executor is checked on: one server of 1 to 9 ranks; multi-server
/// shapes, even (2x2, 2x4, 3x3, 2x8, 4x8) and uneven (3+2, 8+4), joined by load/store
/// links (so executors that need load/store everywhere are checked across servers); and
/// the put-only shapes: 3+2 and `2x8` with put-only RoCE across servers, and `tcp8`, every
/// link put-only (see [`put_only_shapes`]).
pub fn shapes() -> Vec<Topology> {
    let mut shapes: Vec<Topology> = (1..=9).map(Topology::single_server).collect();
    for servers in [
        vec![2, 2],
        vec![3, 2],
        vec![4, 4],
        vec![3, 3, 3],
        vec![8, 8],
        vec![8, 4],
        vec![8, 8, 8, 8],
    ] {
        let shape = Topology::servers(servers).expect("valid shape");
        shapes.push(shape.with_fabric_access(LinkAccess::LoadStore, LinkAccess::LoadStore));
    }
    shapes.extend(put_only_shapes());
    shapes
}

/// The shapes with put-only links: servers of 3 and 2 and `2x8` (put-only across
/// servers, as RoCE is), and `tcp8` (8 hosts, every link put-only).
pub fn put_only_shapes() -> Vec<Topology> {
    let mut shapes = vec![Topology::servers(vec![3, 2]).expect("valid shape")];
    for preset in ["2x8", "tcp8"] {
        shapes.push(Topology::parse_spec(preset).expect("preset"));
    }
    shapes
}

/// Whether the executors named `algo` (of any operator) can run over `topology`'s links:
/// a shape whose put-only links their declared [`oxccl::framework::LinkNeed`] refuses is
/// skipped, as selection would refuse it.
fn links_admit(algo: &str, topology: &Topology) -> bool {
    oxccl::registry()
        .expect("registry")
        .executors()
        .filter(|e| e.name == algo)
        .all(|e| e.constraints.links.refusal(topology).is_none())
}

/// Small CCL buffers, so that the staged loop runs more than once. 256 KiB rather than
/// the 1 MiB it was: the cases "larger than the CCL buffer" were most of the suites' time
/// (generating and folding 1 MiB per rank per dtype, up to 32 ranks), and a smaller buffer
/// runs the staged loop through more rounds, not fewer.
pub const SMALL_CCL_BYTES: usize = 256 << 10;

/// Run `algo` on every shape of [`shapes`], zero-copy and staged (the shapes above
/// [`THIN_ABOVE_RANKS`] ranks in one of the two, alternating), with small CCL buffers;
/// `run` checks one setup. Panics with the first failure.
pub fn check_on_every_shape(algo: &'static str, run: impl Fn(&Setup) -> Result<(), String>) {
    check_on_shapes(algo, |_| true, run)
}

/// [`check_on_every_shape`] restricted to the shapes `keep` accepts.
pub fn check_on_shapes(
    algo: &'static str,
    keep: impl Fn(&Topology) -> bool,
    run: impl Fn(&Setup) -> Result<(), String>,
) {
    for (i, topology) in shapes().into_iter().enumerate() {
        if !keep(&topology) || !links_admit(algo, &topology) {
            continue;
        }
        let modes: &[bool] = match topology.ranks() > THIN_ABOVE_RANKS {
            true if i % 2 == 0 => &[true],
            true => &[false],
            false => &[true, false],
        };
        for &zero_copy in modes {
            let setup = Setup {
                algo: Some(algo),
                topology: topology.clone(),
                zero_copy,
                ccl_bytes: SMALL_CCL_BYTES,
                device: None,
            };
            if let Err(e) = run(&setup) {
                panic!("{e}");
            }
        }
    }
}

/// The executors registered for `kind` are exactly `covered`: a new executor needs a test.
pub fn assert_executors_covered(kind: oxccl::OpKind, covered: &[&str]) {
    let registered: Vec<&str> = oxccl::registry()
        .expect("registry")
        .executors_for(kind)
        .map(|e| e.name)
        .collect();
    assert_eq!(
        registered, covered,
        "add a test for each new {kind} executor"
    );
}

/// Every rank's program of a `count`-element f32 sum AllReduce by `algo` on one server of
/// `ranks` (zero-copy), as a communicator with that override would run it.
pub fn record_all_reduce(
    algo: &str,
    ranks: usize,
    count: usize,
) -> oxccl::framework::analyzer::Recording {
    let mut config = Config {
        topology: Some(Topology::single_server(ranks)),
        ..Config::default()
    };
    config.algo.set(Some(oxccl::OpKind::AllReduce), algo);
    let op = OpParam::all_reduce(count, DataType::F32, ReduceOp::Sum);
    oxccl::framework::analyzer::Recording::record(&op, false, config).expect("record")
}
