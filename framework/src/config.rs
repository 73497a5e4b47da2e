//! Communicator configuration, and the one place that reads oxccl's environment.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OXCCL_ALGO` | executor override per operator: `all_reduce=ring;all_gather=mesh`, or a bare name for every operator (an operator without that executor refuses its calls); each operator (and the bare form) at most once | none |
//! | `OXCCL_BUFFSIZE` | size of each CCL buffer (CclIn and CclOut) per rank, MiB, 1 to 1048576 | 32 |
//! | `OXCCL_EXEC_TIMEOUT` | seconds a Wait may block before it is an error, 0.001 to 1e9 | 60 |
//! | `OXCCL_HOST_THREADS` | worker threads of the host device, 0 to 1024; 0 = one per core | 0 |
//! | `OXCCL_ZERO_COPY` | 1: eager ops run on user buffers when the device allows it; 0: always stage through the CCL buffers | 1 |
//! | `OXCCL_SHARED_BUFFERS` | 1: in a job of processes on one host, peers map each other's user buffers and calls run zero-copy (with `OXCCL_ZERO_COPY`=1), so every call's buffers must come from `alloc_shared` (a call on other memory is an error); 0: calls stage through the CCL buffers, on any memory. The same on every rank | 0 |
//! | `OXCCL_TOPO_FILE` | the communicator's topology: a preset (`mesh8`, `2x8`, `hostN`, `1xN`...) or a TOML file | the device's machine: for the host device one CPU host (`hostN`: links over one shared memory bus), else one server, full mesh |
//! | `OXCCL_TUNE_FILE` | a tuning table written by `oxccl tune` (see [`crate::tune`]): `select_alg` runs the fastest measured executor for sizes it covers | none (the model decides) |
//! | `OXCCL_CHECK_CALLS` | 1: ranks agree on every call (operator, type, op, root, counts, executor) before it runs, and a mismatch is an error on every rank (see [`crate::agreement`]); 0: skip the check | 1 |
//! | `OXCCL_GRAPH_CHECK` | 1: compiling a graph (`oxccl-graph`) also proves the captured sequence with the analyzer (deadlocks, lost wakeups, memory conflicts across its operations), and a failure refuses the graph; 0: skip | 0 |
//! | `OXCCL_HOSTID` | the host this rank says it runs on, instead of its hostname and boot id (see [`crate::bootstrap::HostId`]), as `NCCL_HOSTID`: ranks that give the same value share memory, others meet over the network. For containers that hide the host, and to try a job of several hosts on one machine; never give two machines one value | hostname and boot id |
//! | `OXCCL_TRANSPORT` | how ranks in other processes are reached (see [`crate::transport`]): `auto` (shared memory on a host; between hosts RDMA where both ranks opened a port, else TCP), `shm`, `tcp` or `rdma` (every peer over TCP, or over RDMA, also on one host) | auto |
//! | `OXCCL_RDMA_DEVICE`, `OXCCL_RDMA_PORT`, `OXCCL_RDMA_GID_INDEX`, `OXCCL_RDMA_TC` | the RDMA port a rank opens (a build with the `rdma` feature; see `oxccl_platform::transport::rdma::Settings`): the device by name, its port, the GID index (RoCE) and the traffic class | the first device, port 1, GID 0, class 0 |
//! | `OXCCL_DEVICE` | the backend: `host` (threads of this process), `cuda` (NVIDIA GPUs; a build with the `cuda` feature), `sim` (records programs) | host |
//! | `OXCCL_CUDA_DEVICES` | the cuda backend's placement: one CUDA device ordinal for every local rank (`0`: all on GPU 0, as virtual ranks), one per local rank (`0,0,1,1`), or in a job of processes one per rank of the host, of which each process takes its own | round-robin over the GPUs from the process's place among its host's ranks (`LOCAL_RANK`): one rank per GPU when there are enough; the C ABI's `oxcclCommInitRank` takes the calling thread's current CUDA device when one is |
//! | `OXCCL_CUDA_GRAPHS` | 1: the cuda backend runs a graph launch (`oxccl-graph`) that holds every local rank's steps on device buffers as one CUDA graph per GPU, built on its first launch and replayed after; 0: step by step, as eager calls | 1 |
//! | `OXCCL_CUDA_PIN_STAGING` | 1: in a job of processes on GPUs, the cuda backend page-locks the host blocks each call is staged through, once when they are made (`cuMemHostRegister`), so its copies across the bus are DMA; 0: they stay pageable | 1 |
//! | `OXCCL_LINK_CHANNELS` | notify channels per link, 1 to 64: how many handshakes two ranks may have in flight at once (an imported MSCCL-IR file needs one per message slot of each of its channels, and pipelines deeper with more) | 2, or what the imported files need when more |
//! | `OXCCL_ALGO_FILES` | MSCCL-IR algorithm files imported as executors (see [`crate::msccl`]): files or folders (their `*.xml`), `:`-separated; read when the registry is first built | none |
//! | `OXCCL_HOST_FIGURES` | where the host device's cost model takes its copy rates, cache sizes and task cost: `measured` (this machine's, measured once and kept in the cache folder; see `oxccl_platform::host::calibration`) or `reference` (the development machine's, the same everywhere; see [`crate::topology::presets`]). A job of processes takes rank 0's setting and its host's figures, which every rank then models its host with | measured |
//! | `OXCCL_HOST_CACHE` | the folder the measured host figures are kept in (`off`: measure in every process) | `$XDG_CACHE_HOME/oxccl`, else `$HOME/.cache/oxccl` |
//! | `OXCCL_LOG` | `tracing` filter (`info`, `oxccl=debug`, ...); one that does not parse is an error | off |
//!
//! Every error names its variable, the value found and what would be valid.
//!
//! The default CCL buffer is 32 MiB rather than HCCL's 200 MB: on the host device every
//! rank is in this process, so 8 ranks hold 16 buffers (512 MiB of address space, committed
//! only as used), and staging larger chunks buys nothing once a chunk is well past the
//! caches.

use crate::error::ConfigError;
use crate::limits::{MAX_BUFFER_BYTES, MAX_HOST_THREADS};
use crate::select::AlgoOverride;
use crate::topology::Topology;
use crate::tune::TuneTable;
use std::time::Duration;

/// Everything a communicator is created with.
#[derive(Clone, Debug)]
pub struct Config {
    pub ccl_buffer_bytes: usize,
    pub exec_timeout: Duration,
    pub host_threads: usize,
    pub algo: AlgoOverride,
    pub zero_copy: bool,
    /// In a job of processes, peers on this host map each other's user buffers, which
    /// must come from `alloc_shared` (`OXCCL_SHARED_BUFFERS`; see
    /// [`crate::Communicator::alloc_shared`]).
    pub shared_buffers: bool,
    /// The host this rank says it runs on (`OXCCL_HOSTID`), instead of its hostname and
    /// boot id; `None`: the real one.
    pub host_id: Option<String>,
    /// Ranks agree on every call before it runs (`OXCCL_CHECK_CALLS`, see
    /// [`crate::agreement`]).
    pub check_calls: bool,
    /// Compiling a graph also runs the analyzer over the captured sequence
    /// (`OXCCL_GRAPH_CHECK`).
    pub graph_check: bool,
    pub log_filter: Option<String>,
    /// The backend kind, as registered in `oxccl_platform::registry` (`host`: threads of
    /// this process; `sim`: records programs for the analyzer, zero-copy when
    /// `zero_copy`). An unknown kind is an error listing the known ones.
    pub device: String,
    /// The topology; `None` means the device's machine
    /// ([`Topology::default_for_device`]): one CPU host for the host device, one server
    /// with all ranks fully connected otherwise.
    pub topology: Option<Topology>,
    /// Notify channels per link; at least 1. Executors that pipeline alternate channels
    /// by iteration parity, hence the default of 2.
    pub link_channels: usize,
    /// Measured executor times (`OXCCL_TUNE_FILE`, written by `oxccl tune`) that
    /// `select_alg` prefers over the cost model.
    pub tune: Option<std::sync::Arc<crate::tune::TuneTable>>,
    /// How ranks in other processes are reached (`OXCCL_TRANSPORT`).
    pub transport: crate::transport::TransportChoice,
    /// The RDMA device `init_rank` uses, instead of opening the one `OXCCL_RDMA_DEVICE`
    /// names (see [`crate::transport`]); `None`: open it from the environment, in a build
    /// with the `rdma` feature. One communicator's: its device takes every receive
    /// completion of the NIC, so communicators must not share one.
    pub rdma_nic: Option<crate::transport::RdmaNic>,
    /// The cuda backend's placement (`OXCCL_CUDA_DEVICES`): one ordinal for every local
    /// rank, one per local rank, or in a job of processes one per rank of the host;
    /// empty: round-robin over the GPUs from the process's place on its host.
    pub gpus: Vec<usize>,
    /// The cuda backend replays graph mode's launches as CUDA graphs where it can
    /// (`OXCCL_CUDA_GRAPHS`).
    pub cuda_graphs: bool,
    /// The cuda backend page-locks the host blocks that stage a job of processes' calls
    /// (`OXCCL_CUDA_PIN_STAGING`).
    pub pin_staging: bool,
    /// Where an in-process CPU host's cost-model figures come from
    /// (`OXCCL_HOST_FIGURES`).
    pub host_figures: HostFiguresFrom,
}

/// Where the cost model's figures of a CPU host come from, for a communicator given no
/// topology (`OXCCL_HOST_FIGURES`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum HostFiguresFrom {
    /// This machine's copy rates, caches and task costs, measured once per machine
    /// (`oxccl_platform::host::calibration`). A job of processes takes its rank 0's
    /// (whose setting decides for the job), so that hosts measured apart still agree
    /// on every selection.
    #[default]
    Measured,
    /// The development machine's figures ([`crate::topology::presets`]): the same
    /// selections on every machine.
    Reference,
}

impl HostFiguresFrom {
    /// `topology`, a defaulted one (given by no file or caller), with the figures this
    /// choice names: this machine's measured ones where it is a CPU host
    /// ([`Topology::with_measured_host`]), or as it is.
    pub fn apply(self, topology: Topology) -> Topology {
        match self {
            HostFiguresFrom::Measured => topology.with_measured_host(),
            HostFiguresFrom::Reference => topology,
        }
    }
}

impl std::str::FromStr for HostFiguresFrom {
    type Err = ConfigError;

    fn from_str(value: &str) -> Result<Self, ConfigError> {
        match value.trim() {
            "measured" => Ok(HostFiguresFrom::Measured),
            "reference" => Ok(HostFiguresFrom::Reference),
            _ => Err(ConfigError::new(
                "OXCCL_HOST_FIGURES",
                value,
                "use `measured` (this machine's, the default) or `reference` (the same everywhere)",
            )),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ccl_buffer_bytes: 32 << 20,
            exec_timeout: Duration::from_secs(60),
            host_threads: 0,
            algo: AlgoOverride::default(),
            zero_copy: true,
            shared_buffers: false,
            host_id: None,
            check_calls: true,
            graph_check: false,
            log_filter: None,
            device: "host".to_string(),
            topology: None,
            link_channels: 2,
            tune: None,
            transport: Default::default(),
            rdma_nic: None,
            gpus: Vec::new(),
            cuda_graphs: true,
            pin_staging: true,
            host_figures: HostFiguresFrom::Measured,
        }
    }
}

/// Shortest `OXCCL_EXEC_TIMEOUT`, seconds: below a millisecond a Wait would time out
/// before a peer thread is even scheduled.
pub const MIN_EXEC_TIMEOUT_S: f64 = 1e-3;
/// Longest `OXCCL_EXEC_TIMEOUT`, seconds (about 31 years: "never", still a valid deadline).
pub const MAX_EXEC_TIMEOUT_S: f64 = 1e9;
/// Largest `OXCCL_BUFFSIZE`, MiB (1 TiB, [`crate::limits::MAX_BUFFER_BYTES`]).
pub const MAX_BUFFSIZE_MIB: usize = MAX_BUFFER_BYTES >> 20;

/// `value` as a `T` in `valid`, or an error naming `var`, the value and the valid range
/// (`unit` says what the number counts).
fn parse_in_range<T>(
    var: &'static str,
    value: &str,
    valid: std::ops::RangeInclusive<T>,
    unit: &str,
) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    let bad = |found: String| {
        let expected = format!("expected {unit} from {} to {}", valid.start(), valid.end());
        ConfigError::new(var, value, format!("{found}; {expected}"))
    };
    match value.trim().parse::<T>() {
        Ok(v) if valid.contains(&v) => Ok(v),
        Ok(v) => Err(bad(format!("{v} is out of range"))),
        Err(_) => Err(bad("not a number".into())),
    }
}

fn ccl_buffer_bytes(value: &str) -> Result<usize, ConfigError> {
    let mib = parse_in_range("OXCCL_BUFFSIZE", value, 1..=MAX_BUFFSIZE_MIB, "MiB")?;
    Ok(mib << 20)
}

fn exec_timeout(value: &str) -> Result<Duration, ConfigError> {
    let valid = MIN_EXEC_TIMEOUT_S..=MAX_EXEC_TIMEOUT_S;
    let secs = parse_in_range("OXCCL_EXEC_TIMEOUT", value, valid, "seconds")?;
    Ok(Duration::from_secs_f64(secs))
}

fn host_threads(value: &str) -> Result<usize, ConfigError> {
    parse_in_range(
        "OXCCL_HOST_THREADS",
        value,
        0..=MAX_HOST_THREADS,
        "worker threads (0: one per core)",
    )
}

/// The most bytes an `OXCCL_HOSTID` may have (it travels in every rank's bootstrap info).
const MAX_HOST_ID: usize = 255;

/// `OXCCL_HOSTID`: a host's name, trimmed, printable, not empty.
fn host_id(value: &str) -> Result<String, ConfigError> {
    let id = value.trim();
    let fault = if id.is_empty() {
        Some("give a name (ranks with the same name share memory), or leave it unset")
    } else if id.len() > MAX_HOST_ID {
        Some("at most 255 bytes")
    } else if id.chars().any(char::is_control) {
        Some("printable characters only")
    } else {
        None
    };
    match fault {
        Some(reason) => Err(ConfigError::new("OXCCL_HOSTID", value, reason)),
        None => Ok(id.to_string()),
    }
}

/// `OXCCL_DEVICE`: a registered backend kind.
fn device_kind(value: &str) -> Result<String, ConfigError> {
    let kind = value.trim();
    let known = oxccl_platform::registry::kinds();
    if known.contains(&kind) {
        return Ok(kind.to_string());
    }
    let hint = match kind {
        "cuda" => " (this build has no cuda backend: build with `--features cuda`)",
        _ => "",
    };
    Err(ConfigError::new(
        "OXCCL_DEVICE",
        value,
        format!("one of {}{hint}", known.join(", ")),
    ))
}

/// `OXCCL_CUDA_DEVICES`: comma-separated CUDA device ordinals.
fn gpu_ordinals(value: &str) -> Result<Vec<usize>, ConfigError> {
    let bad = || {
        ConfigError::new(
            "OXCCL_CUDA_DEVICES",
            value,
            "CUDA device ordinals separated by commas: one for every local rank, or one per \
             local rank",
        )
    };
    value
        .split(',')
        .map(|s| s.trim().parse::<usize>().map_err(|_| bad()))
        .collect()
}

/// The `OXCCL_LOG` filter, checked with the parser that will apply it; blank means off.
fn log_filter(value: &str) -> Result<Option<String>, ConfigError> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    match tracing_subscriber::EnvFilter::try_new(value) {
        Ok(_) => Ok(Some(value.to_string())),
        Err(e) => Err(ConfigError::new(
            "OXCCL_LOG",
            value,
            "not a tracing filter; write a level (`info`, `debug`) or `target=level` \
             directives joined by commas, e.g. `oxccl=debug,info`",
        )
        .caused_by(e)),
    }
}

/// A 1/0 switch (`true`/`false`, `on`/`off` too).
fn parse_switch(var: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.trim() {
        "1" | "true" | "on" => Ok(true),
        "0" | "false" | "off" => Ok(false),
        _ => Err(ConfigError::new(
            var,
            value,
            "use 1 (or true, on) or 0 (or false, off)",
        )),
    }
}

/// Why a topology spec (of `OXCCL_TOPO_FILE`, `--topo`) was refused; the cause says what
/// was wrong with it.
pub const TOPOLOGY_REFUSED: &str =
    "not a topology oxccl can use; name a preset (mesh8, 2x8, 1xN...) or a readable TOML \
     topology file";

/// The tuning table named by `OXCCL_TUNE_FILE`; a bad file names the variable, the path,
/// the line and what was wrong.
fn load_tune_file(value: &str) -> Result<TuneTable, ConfigError> {
    let bad = |reason: &str| ConfigError::new("OXCCL_TUNE_FILE", value, reason);
    let path = value.trim();
    if path.is_empty() {
        return Err(bad(
            "name a tuning table written by `oxccl tune`, or unset the variable",
        ));
    }
    TuneTable::load(path).map_err(|e| {
        bad("not a tuning table oxccl can use; fix or rewrite it with `oxccl tune`").caused_by(e)
    })
}

impl Config {
    /// Defaults overridden by the `OXCCL_*` environment variables.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// Like [`Config::from_env`] with an explicit lookup (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut config = Config::default();
        if let Some(v) = get("OXCCL_BUFFSIZE") {
            config.ccl_buffer_bytes = ccl_buffer_bytes(&v)?;
        }
        if let Some(v) = get("OXCCL_EXEC_TIMEOUT") {
            config.exec_timeout = exec_timeout(&v)?;
        }
        if let Some(v) = get("OXCCL_HOST_THREADS") {
            config.host_threads = host_threads(&v)?;
        }
        if let Some(v) = get("OXCCL_ZERO_COPY") {
            config.zero_copy = parse_switch("OXCCL_ZERO_COPY", &v)?;
        }
        if let Some(v) = get("OXCCL_SHARED_BUFFERS") {
            config.shared_buffers = parse_switch("OXCCL_SHARED_BUFFERS", &v)?;
        }
        if let Some(v) = get("OXCCL_HOSTID") {
            config.host_id = Some(host_id(&v)?);
        }
        if let Some(v) = get("OXCCL_CHECK_CALLS") {
            config.check_calls = parse_switch("OXCCL_CHECK_CALLS", &v)?;
        }
        if let Some(v) = get("OXCCL_GRAPH_CHECK") {
            config.graph_check = parse_switch("OXCCL_GRAPH_CHECK", &v)?;
        }
        if let Some(v) = get("OXCCL_CUDA_GRAPHS") {
            config.cuda_graphs = parse_switch("OXCCL_CUDA_GRAPHS", &v)?;
        }
        if let Some(v) = get("OXCCL_CUDA_PIN_STAGING") {
            config.pin_staging = parse_switch("OXCCL_CUDA_PIN_STAGING", &v)?;
        }
        if let Some(v) = get("OXCCL_ALGO") {
            config.algo = v.parse()?;
        }
        if let Some(v) = get("OXCCL_TOPO_FILE") {
            let topology = Topology::parse_spec(v.trim()).map_err(|e| {
                ConfigError::new("OXCCL_TOPO_FILE", v.as_str(), TOPOLOGY_REFUSED).caused_by(e)
            })?;
            config.topology = Some(topology);
        }
        if let Some(v) = get("OXCCL_HOST_FIGURES") {
            config.host_figures = v.parse()?;
        }
        if let Some(v) = get("OXCCL_TUNE_FILE") {
            config.tune = Some(std::sync::Arc::new(load_tune_file(&v)?));
        }
        match get("OXCCL_LINK_CHANNELS") {
            Some(v) => {
                config.link_channels = parse_in_range(
                    "OXCCL_LINK_CHANNELS",
                    &v,
                    1..=crate::limits::MAX_LINK_CHANNELS,
                    "notify channels per link",
                )?
            }
            None => config.link_channels = config.link_channels.max(executors_need()),
        }
        if let Some(v) = get("OXCCL_TRANSPORT") {
            config.transport = v.parse()?;
        }
        if let Some(v) = get("OXCCL_DEVICE") {
            config.device = device_kind(&v)?;
        }
        if let Some(v) = get("OXCCL_CUDA_DEVICES") {
            config.gpus = gpu_ordinals(&v)?;
        }
        if let Some(v) = get("OXCCL_LOG") {
            config.log_filter = log_filter(&v)?;
        }
        Ok(config)
    }
}

/// The most link channels a registered executor needs (an imported MSCCL-IR file: one per
/// message slot of each of its channels), at most [`crate::limits::MAX_LINK_CHANNELS`]; 1
/// when the registry cannot be built (its error surfaces at the first collective).
///
/// This builds the registry: algorithm files must be added before the configuration is
/// read from the environment.
fn executors_need() -> usize {
    crate::registry::registry()
        .map(|r| r.executors().map(|e| e.constraints.link_channels).max())
        .ok()
        .flatten()
        .unwrap_or(1)
        .clamp(1, crate::limits::MAX_LINK_CHANNELS)
}

/// The algorithm files `OXCCL_ALGO_FILES` names (`:`-separated files or folders; empty
/// parts are skipped), read by the registry when it is first built ([`crate::msccl`]).
pub fn algo_files_from_env() -> Result<Vec<std::path::PathBuf>, ConfigError> {
    algo_files(std::env::var_os("OXCCL_ALGO_FILES"))
}

fn algo_files(value: Option<std::ffi::OsString>) -> Result<Vec<std::path::PathBuf>, ConfigError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let paths: Vec<std::path::PathBuf> = std::env::split_paths(&value)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    if let Some(missing) = paths.iter().find(|p| !p.exists()) {
        return Err(ConfigError::new(
            "OXCCL_ALGO_FILES",
            value.to_string_lossy(),
            format!(
                "{} does not exist; give MSCCL-IR files or folders of them, separated by `:`",
                missing.display()
            ),
        ));
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |var| pairs.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone())
    }

    #[test]
    fn reads_every_variable() {
        let c = Config::from_lookup(env(&[
            ("OXCCL_BUFFSIZE", "4"),
            ("OXCCL_EXEC_TIMEOUT", "0.5"),
            ("OXCCL_HOST_THREADS", "3"),
            ("OXCCL_ZERO_COPY", "0"),
            ("OXCCL_SHARED_BUFFERS", "1"),
            ("OXCCL_HOSTID", " node-7 "),
            ("OXCCL_LOG", "debug"),
            ("OXCCL_CUDA_GRAPHS", "0"),
            ("OXCCL_CUDA_PIN_STAGING", "0"),
        ]))
        .unwrap();
        assert!(c.shared_buffers);
        assert!(!c.cuda_graphs);
        assert!(!c.pin_staging);
        assert!(
            Config::default().pin_staging,
            "staging is pinned by default"
        );
        assert!(
            Config::default().cuda_graphs,
            "CUDA graphs are on by default"
        );
        assert_eq!(c.host_id.as_deref(), Some("node-7"));
        assert_eq!(c.ccl_buffer_bytes, 4 << 20);
        assert_eq!(c.exec_timeout, Duration::from_millis(500));
        assert_eq!(c.host_threads, 3);
        assert!(!c.zero_copy);
        assert_eq!(c.log_filter.as_deref(), Some("debug"));
        let c = Config::from_lookup(env(&[("OXCCL_TOPO_FILE", "2x8")])).unwrap();
        assert_eq!(c.topology.map(|t| t.ranks()), Some(16));
    }

    #[test]
    fn host_figures_are_measured_unless_the_reference_is_asked_for() {
        assert_eq!(Config::default().host_figures, HostFiguresFrom::Measured);
        for (value, from) in [
            ("measured", HostFiguresFrom::Measured),
            (" reference ", HostFiguresFrom::Reference),
        ] {
            let c = Config::from_lookup(env(&[("OXCCL_HOST_FIGURES", value)])).unwrap();
            assert_eq!(c.host_figures, from);
        }
        let err = Config::from_lookup(env(&[("OXCCL_HOST_FIGURES", "fast")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("OXCCL_HOST_FIGURES") && err.contains("fast") && err.contains("reference"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_name_the_variable_and_what_is_valid() {
        for (var, value, valid) in [
            ("OXCCL_BUFFSIZE", "0", "from 1 to 1048576"),
            ("OXCCL_BUFFSIZE", "lots", "from 1 to 1048576"),
            ("OXCCL_BUFFSIZE", "1048577", "from 1 to 1048576"),
            (
                "OXCCL_BUFFSIZE",
                "18446744073709551615",
                "from 1 to 1048576",
            ),
            ("OXCCL_EXEC_TIMEOUT", "-1", "from 0.001 to 1000000000"),
            ("OXCCL_EXEC_TIMEOUT", "1e-9", "from 0.001"),
            ("OXCCL_EXEC_TIMEOUT", "NaN", "from 0.001"),
            ("OXCCL_EXEC_TIMEOUT", "inf", "from 0.001"),
            ("OXCCL_EXEC_TIMEOUT", "1e10", "to 1000000000"),
            ("OXCCL_HOST_THREADS", "x", "from 0 to 1024"),
            ("OXCCL_HOST_THREADS", "1025", "from 0 to 1024"),
            ("OXCCL_HOST_THREADS", "-1", "from 0 to 1024"),
            ("OXCCL_ZERO_COPY", "maybe", "use 1"),
            ("OXCCL_CHECK_CALLS", "2", "use 1"),
            ("OXCCL_SHARED_BUFFERS", "2", "use 1"),
            ("OXCCL_GRAPH_CHECK", "yes", "use 1"),
            ("OXCCL_CUDA_GRAPHS", "yes", "use 1"),
            ("OXCCL_CUDA_PIN_STAGING", "yes", "use 1"),
            ("OXCCL_HOSTID", " ", "give a name"),
            ("OXCCL_HOSTID", "a\nb", "printable"),
            ("OXCCL_LOG", "oxccl=[", "e.g. `oxccl=debug,info`"),
            ("OXCCL_LOG", "info,=", "directives"),
            ("OXCCL_ALGO", "all_reduce=ring;all_reduce=mesh", "keep one"),
            (
                "OXCCL_TOPO_FILE",
                "/no/such/file.toml",
                "/no/such/file.toml",
            ),
            ("OXCCL_TOPO_FILE", "99999999999x99999999999", "at most 4096"),
            ("OXCCL_TUNE_FILE", "/no/such/tune.txt", "cannot read"),
            ("OXCCL_TUNE_FILE", " ", "unset"),
            ("OXCCL_DEVICE", "tpu", "host, sim"),
            ("OXCCL_CUDA_DEVICES", "0,x", "ordinals separated by commas"),
            ("OXCCL_CUDA_DEVICES", "", "ordinals separated by commas"),
        ] {
            let err = Config::from_lookup(env(&[(var, value)])).unwrap_err();
            assert_eq!(err.var, var);
            let message = crate::error::with_causes(&err);
            assert!(message.starts_with(var), "{message}");
            assert!(message.contains(valid), "{valid:?} not in {message}");
        }
    }

    #[test]
    fn device_and_placement_come_from_the_environment() {
        let c = Config::from_lookup(env(&[
            ("OXCCL_DEVICE", " sim "),
            ("OXCCL_CUDA_DEVICES", "0, 0,1"),
        ]))
        .unwrap();
        assert_eq!((c.device.as_str(), c.gpus), ("sim", vec![0, 0, 1]));
    }

    #[test]
    fn unreadable_files_keep_the_io_error_as_a_cause() {
        for var in ["OXCCL_TOPO_FILE", "OXCCL_TUNE_FILE"] {
            let err = Config::from_lookup(env(&[(var, "/no/such/file.toml")])).unwrap_err();
            let io = crate::error::chain(&err)
                .find_map(|e| e.downcast_ref::<std::io::Error>())
                .unwrap_or_else(|| panic!("{var}: no io::Error in {err:?}"));
            assert_eq!(io.kind(), std::io::ErrorKind::NotFound, "{var}");
            let message = err.to_string();
            assert!(message.starts_with(var), "{message}");
        }
        let dir = std::env::temp_dir();
        let bad = dir.join(format!("oxccl-config-topo-{}.toml", std::process::id()));
        std::fs::write(&bad, "servers = [8\n").unwrap();
        let err = Config::from_lookup(env(&[("OXCCL_TOPO_FILE", bad.to_str().unwrap())]));
        std::fs::remove_file(&bad).unwrap();
        let err = err.unwrap_err();
        assert!(
            crate::error::chain(&err).any(|e| e.is::<toml::de::Error>()),
            "{err:?}"
        );
    }

    #[test]
    fn bounds_themselves_are_valid() {
        let c = Config::from_lookup(env(&[
            ("OXCCL_BUFFSIZE", "1048576"),
            ("OXCCL_EXEC_TIMEOUT", "0.001"),
            ("OXCCL_HOST_THREADS", "1024"),
            ("OXCCL_LOG", "oxccl=debug,info"),
        ]))
        .unwrap();
        assert_eq!(c.ccl_buffer_bytes, MAX_BUFFER_BYTES);
        assert_eq!(c.exec_timeout, Duration::from_millis(1));
        assert_eq!(c.host_threads, MAX_HOST_THREADS);
        let blank = Config::from_lookup(env(&[("OXCCL_LOG", "  ")])).unwrap();
        assert_eq!(blank.log_filter, None);
    }

    #[test]
    fn algo_naming_an_operator_twice_quotes_both_entries() {
        for (text, first, second) in [
            (
                "all_reduce=ring;all_reduce=mesh",
                "all_reduce=ring",
                "all_reduce=mesh",
            ),
            (
                "all-reduce=ring; AllReduce = mesh",
                "all-reduce=ring",
                "AllReduce = mesh",
            ),
            ("ring;all_gather=mesh;mesh", "ring", "mesh"),
        ] {
            let err = Config::from_lookup(env(&[("OXCCL_ALGO", text)])).unwrap_err();
            let message = err.to_string();
            for needle in [format!("`{first}`"), format!("`{second}`")] {
                assert!(message.contains(&needle), "{needle} not in {message}");
            }
        }
        let ok = Config::from_lookup(env(&[("OXCCL_ALGO", "all_reduce=ring;mesh")])).unwrap();
        assert_eq!(ok.algo.for_op(crate::OpKind::AllGather), Some("mesh"));
    }

    #[test]
    fn tune_file_is_loaded_and_its_errors_name_the_line() {
        let dir = std::env::temp_dir();
        let good = dir.join(format!("oxccl-config-tune-{}.txt", std::process::id()));
        std::fs::write(
            &good,
            "oxccl-tune 1\nall_reduce 8 float 1024 ring 3.5 [8]\n",
        )
        .unwrap();
        let c = Config::from_lookup(env(&[("OXCCL_TUNE_FILE", good.to_str().unwrap())]));
        std::fs::write(
            &good,
            "oxccl-tune 1\n\nall_reduce 8 float 1024 ring slow [8]\n",
        )
        .unwrap();
        let err =
            Config::from_lookup(env(&[("OXCCL_TUNE_FILE", good.to_str().unwrap())])).unwrap_err();
        std::fs::remove_file(&good).unwrap();
        assert_eq!(c.unwrap().tune.map(|t| t.entries.len()), Some(1));
        let message = crate::error::with_causes(&err);
        assert_eq!(err.var, "OXCCL_TUNE_FILE");
        for needle in ["OXCCL_TUNE_FILE", good.to_str().unwrap(), "line 3", "slow"] {
            assert!(message.contains(needle), "{needle:?} not in {message}");
        }
    }
}
