//! Built-in topologies, and where their figures come from.
//!
//! The presets model the machines oxccl's algorithms are written for: one server of eight
//! Ascend 910B NPUs in a full mesh of HCCS links, and servers of those joined by RoCE.
//! Bandwidths are per link and per direction, in GB/s (1e9 bytes per second).
//!
//! | figure | value | source |
//! |---|---|---|
//! | HCCS link bandwidth | 56 GB/s per direction | public: the HCCL AllReduce contest statement (8 Ascend 910B in a full mesh of HCCS links of about 56 GB/s each); consistent with the 392 GB/s of HCCS per NPU commonly quoted for Atlas 800T A2 servers (7 links x 56 GB/s) |
//! | HCCS link latency | 1.0 us | **assumption**: Huawei publishes no figure; the order of a one-way DMA handshake between peer devices on NVLink-class links |
//! | RoCE bandwidth | 25 GB/s per direction | public: one 200 Gb/s RoCE v2 port per NPU in Atlas 800T A2-class servers (8 x 200GE per server), 200 Gb/s / 8 bits; protocol overhead ignored |
//! | RoCE latency | 3.0 us | **assumption**: typical NIC-to-NIC RDMA write latency through one switch (2-5 us) |
//! | shared NIC | 25 GB/s per rank | **model choice**: one NIC per rank; every inter-server transfer of a rank shares it |
//! | HCCS access | load/store | HCCS (like NVLink, or shared memory between processes) maps the peer's memory: reads and writes of any buffer |
//! | RoCE access | put-only | an RDMA write (and a TCP send) lands only in memory the peer registered: its CCL buffers and scratch, plus its signals; reading or writing its user buffers would need a registration per call |
//! | TCP bandwidth | 3.125 GB/s per direction | public: a 25 Gb/s Ethernet port (the common cloud-instance and rack NIC), 25 Gb/s / 8 bits; TCP/IP overhead ignored |
//! | TCP latency | 25 us | **assumption**: kernel TCP one-way latency of a small message through one datacenter switch (netperf TCP_RR round trips of 40-60 us are typical on 25 GbE) |
//! | host link bandwidth | 12 GB/s per direction | measured: one thread's memcpy of 256 MiB buffers on the 2-core development machine (`memcpy_bench 1 256`: 12.5 GB/s); a rank of the host device copies a peer's buffer with one thread |
//! | host memory system | 24 GB/s per server | measured: two threads' aggregate memcpy on the same machine (`memcpy_bench 2 256`: 24.2 GB/s); every copy of every rank of one host crosses it |
//! | host cache | 8 MiB held, 48 GB/s per thread | measured: `memcpy_bench 1 N 50` on the same machine copies at 47-49 GB/s while its buffers (2N MiB) stay within 8 MiB, then falls (16 MiB: 31-34, 32 MiB: 17-20, 64 MiB: 12) toward the thread's memory rate; an operation's footprint up to 8 MiB is taken as cached, a larger one as cached by that share ([`Processor::cached_share`]) |
//! | host link latency | 0.5 us | measured: the per-task cost fitted to 53 executors' 1 KiB times on 8 ranks of the same machine (0.45 us) |
//! | host access | load/store | the ranks are threads (or processes mapping shared memory) of one host |
//! | host workers | 2 | the development machine's cores, which the host device's pool has; a communicator given no topology gets its own machine's cores instead ([`Topology::default_for_device`]) |
//! | host task cost | 0.05 us | measured: `oxccl perf all-reduce --ranks 8 -b 32 -e 32 -n 3000` on the same machine, `ring` (112 data tasks, 11.7 us) against `mesh-push` (8 data tasks, 7.5 us): 0.04 us per task on the inline path; a measured host takes its own (the host device's probe: a data task with its signals on the inline path) |
//! | host wake-up, ranks in processes | 20 us | measured: `oxccl perf all-reduce --procs 8 -b 1K` over shared memory on the same machine, `put-rd` (3 rounds of signals): 61-66 us per call, about 20 us per round for 8 processes on 2 cores |
//! | host wake-up | 5 us | **estimate**: 8-rank AllReduce at 64 KiB on the same machine, two `oxccl tune` runs: `ring` 167 and 105 us, `mesh-push` 45 and 32 us; ring has 14 steps of signals against mesh-push's 2, some 6-10 us per extra step, part of it data and part a worker picking up the resumed stream on an oversubscribed pool; 5 us was taken. A measured host keeps it: the pickup alone, which a probe can time, is not this figure (`oxccl_platform::host::calibration`'s `dispatch` says why) |
//! | host forwarding | not modelled | the development machine's rate of copying a block another core has just written was not measured, so the reference figures leave it out (`forward_gbps = 0`); a measured host takes its own ([`Processor::forward_gbps`](super::Processor::forward_gbps)) |
//!
//! The host figures make the model see threads and a memory bus that every rank shares
//! instead of engines and a link per pair, which is what decides the host's choices (see
//! [`super::processor`]). The ones above are the development machine's: the reference
//! figures, which the `hostN` presets and `OXCCL_HOST_FIGURES=reference` take. A
//! communicator given no topology takes its own machine's copy rates, caches and task
//! cost instead (a job of processes its rank 0's machine's), measured once per machine
//! ([`Topology::with_measured_host`], `oxccl calibrate` shows them): the rates differ
//! between machines by more than the choices they decide. On a later 2-core VM (one
//! thread: 31 GB/s at a 2 MiB footprint, 13.4-14.7 GB/s from 4 to 32 MiB, 12.8 at 64 MiB,
//! 6.6 GB/s at 256 MiB; two threads: 12 GB/s; `oxccl calibrate`), the reference figures picked executors 1.65x
//! (AllGather, `rhd`), 1.36x (Broadcast, `mesh`) and 1.10x (AlltoAll, `put-mesh`) slower
//! than the fastest at 4 MiB on 8 ranks (`oxccl tune --all --ranks 8 -b 1K -e 64M -f 8`),
//! while its measured figures pick `mesh-push`, `mesh-push` and `pairwise`, the fastest
//! there. A file gives another machine's figures (`[intra]` keys `workers`, `task_us`,
//! `wake_us`, `thread_gbps`, `inline_bytes`, `split_bytes`, `ranks`, `cache_bytes`,
//! `cache_gbps`, `llc_bytes`, `forward_gbps`).
//!
//! Generic shapes `1xN` and `MxN` (any N, M) reuse these figures: a full mesh of HCCS-class
//! links inside each server, and every cross-server pair joined by RDMA through each rank's
//! NIC. For N > 8 the full mesh at 56 GB/s per pair is an **assumption** (real servers of
//! more than 8 devices are switched, and a switch port would be shared among peers); use a
//! TOML file to describe such a machine precisely.

use super::{Fabric, LinkSpec, NicScope, Processor, Topology, Wiring};
use crate::limits::MAX_RANKS;
use oxccl_platform::{LinkAccess, LinkKind};

/// HCCS link of an Ascend 910B, GB/s per direction (392 GB/s per NPU over 7 links).
pub const HCCS_GBPS: f64 = 56.0;
/// HCCS one-way latency, microseconds (assumption, see the module docs).
pub const HCCS_LATENCY_US: f64 = 1.0;
/// A 200 Gb/s RoCE v2 NIC, GB/s per direction.
pub const ROCE_GBPS: f64 = 25.0;
/// RoCE one-way latency through one switch, microseconds (assumption).
pub const ROCE_LATENCY_US: f64 = 3.0;
/// A 25 Gb/s Ethernet port carrying TCP, GB/s per direction.
pub const TCP_GBPS: f64 = 3.125;
/// Kernel TCP one-way latency of a small message, microseconds (assumption).
pub const TCP_LATENCY_US: f64 = 25.0;
/// One thread's copy bandwidth on a CPU host, GB/s (measured, see the module docs).
pub const HOST_LINK_GBPS: f64 = 12.0;
/// A CPU host's memory system, GB/s of copies shared by every rank (measured).
pub const HOST_MEMORY_GBPS: f64 = 24.0;
/// The bytes of an operation's footprint a CPU host's caches keep between calls
/// (measured, see the module docs).
pub const HOST_CACHE_BYTES: usize = 8 << 20;
/// A CPU host's last-level cache, bytes: the development machine's L3 (`lscpu`: 32 MiB,
/// one instance). `memcpy_bench 1 N 50` falls to 17-20 GB/s with buffers of 32 MiB and to
/// the thread's memory rate beyond (see the module docs).
pub const HOST_LLC_BYTES: usize = 32 << 20;
/// One thread's copy rate on cached memory, GB/s (measured, see the module docs).
pub const HOST_CACHE_GBPS: f64 = 48.0;
/// A signal between threads of one host, microseconds (measured).
pub const HOST_LATENCY_US: f64 = 0.5;
/// A Copy or Reduce's thread time on a CPU host besides its bytes, microseconds
/// (measured, see the module docs).
pub const HOST_TASK_US: f64 = 0.05;
/// A worker's pick-up of a runnable stream on a CPU host, microseconds (measured, see the
/// module docs).
pub const HOST_WAKE_US: f64 = 5.0;
/// The same for a rank in a process of its own: a process switch, once per round of
/// waits, which takes a core for this long; a host's switches queue on its cores (see
/// [`Processor::ranks_are_processes`]). Fitted: a round over 8 processes on 2 cores (4
/// switches per core) measures about 20 us.
pub const HOST_PROCESS_WAKE_US: f64 = 5.0;
/// Worker threads of a host in the reference figures: the development machine's cores.
/// In-process communicators replace it by their device's thread count (see
/// [`crate::Communicator::init_all`]).
pub const HOST_WORKERS: usize = 2;

/// A named built-in topology, for listings (`oxccl topo`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PresetInfo {
    pub name: &'static str,
    pub description: &'static str,
}

/// The built-in topologies, by name; `1xN` and `MxN` stand for any sizes.
pub const PRESETS: &[PresetInfo] = &[
    PresetInfo {
        name: "mesh8",
        description: "one Ascend 910B-like server: 8 ranks, full mesh of 56 GB/s HCCS links",
    },
    PresetInfo {
        name: "mesh8-cut",
        description: "mesh8 with the 0-1 link broken (HCCL's AllReduce contest)",
    },
    PresetInfo {
        name: "ring8",
        description: "8 ranks, only ring-neighbour HCCS links (i <-> i+1 mod 8)",
    },
    PresetInfo {
        name: "2x8",
        description: "two mesh8 servers joined by RoCE: one 200 Gb/s NIC per rank",
    },
    PresetInfo {
        name: "tcp8",
        description: "8 hosts of one rank over TCP: every link put-only, 25 Gb/s Ethernet, 25 us",
    },
    PresetInfo {
        name: "hostN",
        description: "N ranks of one CPU host (the host device's default): load/store links over one shared memory bus",
    },
    PresetInfo {
        name: "1xN",
        description: "one server of N ranks (any N) in a full mesh of HCCS-class links",
    },
    PresetInfo {
        name: "MxN",
        description: "M servers of N ranks: HCCS-class mesh inside, RoCE across, one NIC per rank",
    },
];

/// The intra-server fabric of the presets.
pub fn hccs(wiring: Wiring) -> Fabric {
    Fabric {
        spec: LinkSpec {
            kind: LinkKind::Sdma,
            bandwidth_gbps: HCCS_GBPS,
            latency_us: HCCS_LATENCY_US,
            access: LinkAccess::LoadStore,
        },
        wiring,
    }
}

/// The inter-server fabric of the presets.
pub fn roce(wiring: Wiring) -> Fabric {
    Fabric {
        spec: LinkSpec {
            kind: LinkKind::Rdma,
            bandwidth_gbps: ROCE_GBPS,
            latency_us: ROCE_LATENCY_US,
            access: LinkAccess::Put,
        },
        wiring,
    }
}

/// Hosts joined by TCP over Ethernet: asynchronous (RDMA-kind) put-only links.
pub fn tcp(wiring: Wiring) -> Fabric {
    Fabric {
        spec: LinkSpec {
            kind: LinkKind::Rdma,
            bandwidth_gbps: TCP_GBPS,
            latency_us: TCP_LATENCY_US,
            access: LinkAccess::Put,
        },
        wiring,
    }
}

/// The links between ranks of one CPU host: a thread copying from or to a peer's memory.
pub fn host_links() -> Fabric {
    Fabric {
        spec: LinkSpec {
            kind: LinkKind::Sdma,
            bandwidth_gbps: HOST_LINK_GBPS,
            latency_us: HOST_LATENCY_US,
            access: LinkAccess::LoadStore,
        },
        wiring: Wiring::Mesh,
    }
}

/// `ranks` ranks (at least one) of one CPU host: a full mesh of [`host_links`] over one
/// memory system of [`HOST_MEMORY_GBPS`]. What the host device's communicators are
/// modelled on when no topology is given.
pub fn host(ranks: usize) -> Topology {
    let mut t = Topology::unchecked(vec![ranks.max(1)], host_links(), roce(Wiring::None), None);
    t.memory_gbps = Some(HOST_MEMORY_GBPS);
    t.processor = Some(Processor::reference(HOST_WORKERS));
    t
}

/// CPU hosts of the given sizes, each as [`host`], joined by TCP ([`tcp`]) through one
/// Ethernet port per host, which every process of the host shares
/// ([`NicScope::Server`]): a job of host-device processes on several machines.
pub(super) fn hosts(sizes: Vec<usize>) -> Result<Topology, crate::error::ConfigError> {
    let mut t = Topology::from_fabrics(sizes, host_links(), tcp(Wiring::Mesh), Some(TCP_GBPS))?
        .with_nic_scope(NicScope::Server);
    t.memory_gbps = Some(HOST_MEMORY_GBPS);
    t.processor = Some(Processor::reference(HOST_WORKERS));
    Ok(t)
}

/// Servers of the given (non-zero) sizes with the generic figures.
pub(super) fn generic(sizes: &[usize]) -> Topology {
    Topology::unchecked(
        sizes.to_vec(),
        hccs(Wiring::Mesh),
        roce(Wiring::Mesh),
        Some(ROCE_GBPS),
    )
}

/// The preset called `name`, or `None` when there is none.
pub fn preset(name: &str) -> Option<Topology> {
    match name {
        "mesh8" => Some(generic(&[8])),
        "mesh8-cut" => generic(&[8]).with_broken(0, 1).ok(),
        "tcp8" => Some(Topology::unchecked(
            vec![1; 8],
            hccs(Wiring::Mesh),
            tcp(Wiring::Mesh),
            Some(TCP_GBPS),
        )),
        "ring8" => Some(Topology::unchecked(
            vec![8],
            hccs(Wiring::Ring),
            roce(Wiring::None),
            None,
        )),
        _ => match host_ranks(name) {
            Some(ranks) => ranks.ok().map(host),
            None => shape(name)?
                .ok()
                .map(|(servers, size)| generic(&vec![size; servers])),
        },
    }
}

/// `hostN` as N: `None` when `name` is not `host` and digits; an error saying what is
/// wrong when N is zero or past [`MAX_RANKS`].
pub fn host_ranks(name: &str) -> Option<Result<usize, String>> {
    let digits = name.strip_prefix("host")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(match digits.parse::<usize>() {
        Ok(n) if (1..=MAX_RANKS).contains(&n) => Ok(n),
        _ => Err(format!(
            "hostN needs N from 1 to {MAX_RANKS} (oxccl_framework::limits::MAX_RANKS)"
        )),
    })
}

/// `MxN` as (M, N): `None` when `name` is not two digit strings joined by `x`; an error
/// saying what is wrong when it is, but M or N is zero or M x N is past [`MAX_RANKS`].
pub fn shape(name: &str) -> Option<Result<(usize, usize), String>> {
    let (m, n) = name.split_once(['x', 'X'])?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(m) && digits(n)) {
        return None;
    }
    let too_many = format!(
        "M x N ranks must be at most {MAX_RANKS} (oxccl_framework::limits::MAX_RANKS); \
         use smaller M and N"
    );
    let (Ok(m), Ok(n)) = (m.parse::<usize>(), n.parse::<usize>()) else {
        return Some(Err(too_many));
    };
    Some(match m.checked_mul(n) {
        _ if m == 0 || n == 0 => Err("M servers of N ranks need M and N of at least 1".into()),
        Some(total) if total <= MAX_RANKS => Ok((m, n)),
        _ => Err(too_many),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::LinkStatus;

    #[test]
    fn mesh8_is_the_910b_server() {
        let t = preset("mesh8").unwrap();
        assert_eq!(t.ranks(), 8);
        assert!(t.is_full_mesh());
        let l = t.link(3, 6).unwrap();
        assert_eq!((l.kind, l.bandwidth_gbps), (LinkKind::Sdma, 56.0));
    }

    #[test]
    fn mesh8_cut_has_a_broken_link() {
        let t = preset("mesh8-cut").unwrap();
        assert_eq!(t.link_status(1, 0), LinkStatus::Broken);
        assert_eq!(t.link_kind(0, 1), None);
        assert!(t.link(0, 2).is_some());
        assert!(!t.is_full_mesh());
    }

    #[test]
    fn two_servers_share_a_nic_per_rank() {
        let t = preset("2x8").unwrap();
        assert_eq!(t.server_sizes(), &[8, 8]);
        assert_eq!(t.link_kind(0, 7), Some(LinkKind::Sdma));
        assert_eq!(t.link(0, 9).unwrap().kind, LinkKind::Rdma);
        assert_eq!(t.nic_gbps(), Some(ROCE_GBPS));
        assert!(t.is_full_mesh());
        assert_eq!(preset("3x5").unwrap().server_sizes(), &[5, 5, 5]);
        assert_eq!(preset("1x1024").unwrap().ranks(), 1024);
        assert_eq!(preset("512x8").unwrap().ranks(), 4096);
        assert!(preset("0x8").is_none() && preset("mesh9").is_none());
    }

    #[test]
    fn access_follows_the_fabric() {
        let mesh = preset("mesh8").unwrap();
        assert!(mesh.all_load_store());
        assert_eq!(mesh.link_access(0, 7), Some(LinkAccess::LoadStore));
        assert_eq!(mesh.describe(), "[8]");
        let two = preset("2x8").unwrap();
        assert!(!two.all_load_store());
        assert_eq!(two.link_access(0, 7), Some(LinkAccess::LoadStore));
        assert_eq!(two.link_access(0, 9), Some(LinkAccess::Put));
        assert_eq!(two.describe(), "[8,8] put inter");
        let tcp = preset("tcp8").unwrap();
        assert_eq!(tcp.ranks(), 8);
        assert!(tcp.is_full_mesh() && !tcp.all_load_store());
        assert!((0..8).all(|a| (0..8)
            .filter(|&b| b != a)
            .all(|b| tcp.link_access(a, b) == Some(LinkAccess::Put))));
        assert_eq!(tcp.link(2, 5).unwrap().bandwidth_gbps, TCP_GBPS);
        assert_eq!(tcp.describe(), "[1,1,1,1,1,1,1,1] put all");
        assert!(PRESETS.iter().any(|p| p.name == "tcp8"));
        assert!(
            preset("1x8").unwrap().all_load_store(),
            "one server: no inter link"
        );
    }

    #[test]
    fn host_n_is_one_cpu_host_over_one_memory_bus() {
        let t = preset("host8").unwrap();
        assert_eq!(t.ranks(), 8);
        assert!(t.is_full_mesh() && t.all_load_store());
        assert_eq!(t.memory_gbps(), Some(HOST_MEMORY_GBPS));
        assert_eq!(t.link(2, 5).unwrap().bandwidth_gbps, HOST_LINK_GBPS);
        assert_eq!(t.describe(), "[8]");
        assert_eq!(preset("host1").unwrap().ranks(), 1);
        assert!(preset("host").is_none() && preset("hostx").is_none());
        for bad in ["host0", "host4097", "host99999999999999999999999"] {
            assert!(preset(bad).is_none(), "{bad}");
            assert!(host_ranks(bad).unwrap().is_err(), "{bad}");
            let err = Topology::parse_spec(bad).unwrap_err().to_string();
            assert!(err.contains("from 1 to 4096"), "{bad}: {err}");
        }
        let hosts = hosts(vec![2, 2]).unwrap();
        assert_eq!(hosts.memory_gbps(), Some(HOST_MEMORY_GBPS));
        assert_eq!(hosts.link(0, 2).unwrap().bandwidth_gbps, TCP_GBPS);
        assert_eq!(
            hosts.nic_scope(),
            NicScope::Server,
            "one Ethernet port per host"
        );
        assert_eq!(hosts.nic_of(1), hosts.nic_of(0));
        assert_ne!(hosts.nic_of(2), hosts.nic_of(1));
        assert_eq!(preset("2x8").unwrap().nic_scope(), NicScope::Rank);
        assert!(generic(&[8]).memory_gbps().is_none());
    }

    #[test]
    fn shapes_past_the_rank_limit_are_errors_not_presets() {
        for name in [
            "1x4097",
            "2x2049",
            "99999999999x99999999999",
            "1x18446744073709551616",
        ] {
            let err = shape(name).unwrap().unwrap_err();
            assert!(err.contains("at most 4096"), "{name}: {err}");
            assert!(preset(name).is_none(), "{name}");
        }
        assert!(shape("0x8").unwrap().unwrap_err().contains("at least 1"));
        assert_eq!(shape("4x256"), Some(Ok((4, 256))));
        assert_eq!(shape("mesh8"), None);
        assert_eq!(shape("x8"), None);
    }
}
