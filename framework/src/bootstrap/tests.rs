//! Bootstrap over real sockets on loopback, ranks as threads (the multi-process tests are
//! in `tests/tests/bootstrap.rs`).

use super::*;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const QUICK: Duration = Duration::from_secs(20);

fn loopback_id(ranks: usize, timeout: Duration) -> UniqueId {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
    // Port 0 cannot be joined: listen on a free port found first.
    let port = std::net::TcpListener::bind(addr)
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port");
    let root = SocketAddr::new(addr.ip(), port);
    UniqueId::listen(root, Secret::random().expect("random"), ranks, timeout).expect("root")
}

fn parts(registry: u64) -> Vec<DigestPart> {
    ["registry", "tuning", "topology", "planning"]
        .iter()
        .enumerate()
        .map(|(i, p)| DigestPart {
            part: p.to_string(),
            value: if i == 0 { registry } else { i as u64 },
        })
        .collect()
}

/// Join `ranks` threads; rank r presents `registry(r)` as its registry digest.
fn join_all(
    id: UniqueId,
    ranks: usize,
    registry: impl Fn(usize) -> u64 + Sync,
) -> Vec<Result<JobTable, BootstrapError>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..ranks)
            .map(|r| {
                let digests = parts(registry(r));
                s.spawn(move || join(&id, ranks, RankInfo::this(r, digests), QUICK))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

#[test]
fn ids_round_trip_as_text_and_bytes() {
    let id = UniqueId {
        root: "10.1.2.3:4567".parse().unwrap(),
        secret: Secret([7; SECRET_BYTES]),
        ranks: 16,
    };
    assert_eq!(id.to_string().parse::<UniqueId>().unwrap(), id);
    assert_eq!(UniqueId::from_bytes(&id.to_bytes()).unwrap(), id);
    let v6 = UniqueId {
        root: "[fe80::1%2]:65535".parse().unwrap(),
        ..id
    };
    assert_eq!(UniqueId::from_bytes(&v6.to_bytes()).unwrap(), v6);
    assert!(
        !format!("{id:?}").contains("0707"),
        "Debug shows the secret"
    );
}

#[test]
fn malformed_ids_say_what_is_wrong() {
    for (text, says) in [
        ("nccl-1-00@1.2.3.4:5", "oxccl1-"),
        ("oxccl1-4-00112233445566778899aabbccddeeff", "`@`"),
        (
            "oxccl1-x-00112233445566778899aabbccddeeff@1.2.3.4:5",
            "rank count",
        ),
        ("oxccl1-4-0011@1.2.3.4:5", "32 hexadecimal"),
        ("oxccl1-4-00112233445566778899aabbccddeeff@host", "ip:port"),
    ] {
        let err = text.parse::<UniqueId>().unwrap_err().to_string();
        assert!(err.contains(says), "{text}: {err}");
    }
}

#[test]
fn every_rank_gets_the_same_table() {
    let id = loopback_id(0, QUICK);
    let tables: Vec<JobTable> = join_all(id, 5, |_| 9)
        .into_iter()
        .map(|t| t.expect("joined"))
        .collect();
    assert!(tables.windows(2).all(|w| w[0] == w[1]));
    let table = &tables[0];
    assert_eq!(table.ranks.len(), 5);
    assert_eq!(table.hosts(), vec![(HostId::this(), (0..5).collect())]);
    assert_eq!(table.host_ranks(3), (0..5).collect::<Vec<_>>());
    assert!(table.ranks.iter().all(|i| i.pid == std::process::id()));
}

#[test]
fn hosts_become_servers_when_their_ranks_are_consecutive() {
    let on = |host: &str, rank: Rank| RankInfo {
        rank,
        host: HostId {
            hostname: host.into(),
            boot_id: format!("boot-{host}"),
        },
        pid: 1,
        digests: parts(1),
        tcp: None,
        rdma: None,
        host_figures: None,
    };
    let blocks = JobTable {
        ranks: vec![on("b", 0), on("b", 1), on("a", 2), on("a", 3), on("a", 4)],
    };
    assert_eq!(blocks.server_sizes().unwrap(), vec![2, 3]);
    assert_eq!(blocks.host_ranks(3), vec![2, 3, 4]);
    let cyclic = JobTable {
        ranks: vec![on("a", 0), on("b", 1), on("a", 2), on("b", 3)],
    };
    let err = cyclic.server_sizes().unwrap_err().to_string();
    assert!(err.contains("host a runs ranks 0,2"), "{err}");
    // One name, two boots: two hosts (a cloned machine, two containers).
    let twins = JobTable {
        ranks: vec![
            on("a", 0),
            RankInfo {
                host: HostId {
                    hostname: "a".into(),
                    boot_id: "other".into(),
                },
                ..on("a", 1)
            },
        ],
    };
    assert_eq!(twins.server_sizes().unwrap(), vec![1, 1]);
}

#[test]
fn a_rank_with_another_registry_is_refused_naming_the_part_and_ranks() {
    let id = loopback_id(4, QUICK);
    for result in join_all(id, 4, |r| if r == 2 { 77 } else { 5 }) {
        let err = result.expect_err("refused");
        let BootstrapError::Refused {
            refusal: Refusal::Digests { mismatches },
            ..
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!(mismatches.len(), 1, "{err}");
        assert_eq!(mismatches[0].part, "registry");
        let ranks: Vec<Vec<Rank>> = mismatches[0]
            .groups
            .iter()
            .map(|g| g.ranks.clone())
            .collect();
        assert_eq!(ranks, vec![vec![0, 1, 3], vec![2]]);
        let text = err.to_string();
        assert!(
            text.contains("registry") && text.contains("ranks 2"),
            "{text}"
        );
    }
}

#[test]
fn a_stranger_without_the_secret_is_dropped_and_the_job_goes_on() {
    let id = loopback_id(2, QUICK);
    let mut stranger = std::net::TcpStream::connect(id.root).expect("connect");
    let mut preamble = wire::MAGIC.to_vec();
    preamble.extend_from_slice(&[0u8; SECRET_BYTES]);
    stranger.write_all(&preamble).expect("preamble");
    // A hello the root must never read: it claims rank 0.
    let info = RankInfo::this(0, parts(1));
    let _ = wire::send_frame(&mut stranger, &Hello { ranks: 2, info }, "root");
    let tables = join_all(id, 2, |_| 1);
    assert!(tables.iter().all(Result::is_ok), "{tables:?}");
    let mut rest = Vec::new();
    stranger.set_read_timeout(Some(QUICK)).expect("timeout");
    let _ = stranger.read_to_end(&mut rest);
    assert!(rest.is_empty(), "the stranger got an answer: {rest:?}");
}

#[test]
fn ranks_that_never_come_are_named_to_those_that_did() {
    let id = loopback_id(3, Duration::from_millis(300));
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| s.spawn(move || join(&id, 3, RankInfo::this(r, parts(1)), QUICK)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap().expect_err("missing rank").to_string())
            .collect()
    });
    for e in errors {
        assert!(e.contains("ranks 2 of 3 never joined"), "{e}");
    }
}

#[test]
fn a_second_claim_on_a_rank_and_a_wrong_rank_count_are_refused_alone() {
    let id = loopback_id(3, QUICK);
    let unknown = UniqueId { ranks: 0, ..id };
    let count = join(&unknown, 4, RankInfo::this(1, parts(1)), QUICK).expect_err("count");
    assert!(
        count
            .to_string()
            .contains("started for 4 ranks, the job has 3"),
        "{count}"
    );
    // Two claims on rank 0: whichever the root reads first takes it, the other is refused
    // at once, while the job still waits for ranks 1 and 2.
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(join(&id, 3, RankInfo::this(0, parts(1)), QUICK));
        });
    }
    let dup = rx.recv().unwrap().expect_err("one claim is refused");
    assert!(dup.to_string().contains("rank 0 joined twice"), "{dup}");
    let rest = std::thread::spawn(move || join(&id, 3, RankInfo::this(2, parts(1)), QUICK));
    let table = join(&id, 3, RankInfo::this(1, parts(1)), QUICK).expect("rank 1");
    assert_eq!(rx.recv().unwrap().expect("the other claim joins"), table);
    assert_eq!(rest.join().unwrap().expect("rank 2"), table);
}

#[test]
fn a_first_rank_claiming_a_huge_job_is_refused_before_anything_is_sized() {
    // The id leaves the count open: the first claim would set it.
    let id = loopback_id(0, QUICK);
    let huge = join(&id, 1 << 40, RankInfo::this(1, parts(1)), QUICK).expect_err("huge");
    assert!(huge.to_string().contains("a job has 1 to 4096"), "{huge}");
    // The job is still open for a sane count.
    let tables = join_all(id, 2, |_| 1);
    assert!(tables.iter().all(Result::is_ok), "{tables:?}");
}

#[test]
fn a_root_that_is_not_there_is_reported_after_the_timeout() {
    let id = UniqueId {
        root: "127.0.0.1:1".parse().unwrap(),
        secret: Secret([1; SECRET_BYTES]),
        ranks: 2,
    };
    let err = join(
        &id,
        2,
        RankInfo::this(0, parts(1)),
        Duration::from_millis(200),
    )
    .expect_err("no root");
    assert!(
        matches!(err, BootstrapError::RootUnreachable { .. }),
        "{err}"
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the io error is kept"
    );
    let bad = join(&id, 2, RankInfo::this(2, parts(1)), QUICK).expect_err("rank 2 of 2");
    assert!(
        matches!(bad, BootstrapError::BadRank { rank: 2, ranks: 2 }),
        "{bad}"
    );
}

fn launch(vars: &[(&str, &str)]) -> Result<Option<Launch>, crate::ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Launch::from_lookup(|v| map.get(v).cloned())
}

#[test]
fn launchers_are_read_from_their_own_variables() {
    assert_eq!(launch(&[]).unwrap(), None);
    let mpi = launch(&[
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("PMIX_NAMESPACE", "519766017"),
        ("TMPDIR", "/scratch"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        (mpi.launcher, mpi.rank, mpi.size, mpi.local_rank),
        (Launcher::OpenMpi, 3, 8, Some(1))
    );
    assert_eq!(
        mpi.rendezvous,
        Rendezvous::File("/scratch/oxccl-519766017.id".into())
    );
    let torch = launch(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("LOCAL_RANK", "0"),
        ("MASTER_ADDR", "node7"),
        ("MASTER_PORT", "29500"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(torch.launcher, Launcher::Torchrun);
    assert_eq!(torch.rendezvous, Rendezvous::Address("node7:29501".into()));
    let slurm = launch(&[
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_JOB_ID", "99"),
        ("SLURM_STEP_ID", "0"),
        ("OXCCL_COMM_ID", "10.0.0.1:5000"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(slurm.launcher, Launcher::Slurm);
    assert_eq!(slurm.job, "99.0");
    assert_eq!(
        slurm.rendezvous,
        Rendezvous::Address("10.0.0.1:5000".into())
    );
}

#[test]
fn bad_launcher_variables_name_the_variable() {
    for (vars, var) in [
        (vec![("RANK", "x"), ("WORLD_SIZE", "2")], "RANK"),
        (vec![("RANK", "2"), ("WORLD_SIZE", "2")], "RANK"),
        (vec![("RANK", "0"), ("WORLD_SIZE", "2")], "MASTER_ADDR"),
        (
            vec![
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "a"),
                ("MASTER_PORT", "65535"),
            ],
            "MASTER_PORT",
        ),
        (
            vec![("OXCCL_RANK", "0"), ("OXCCL_SIZE", "2")],
            "OXCCL_COMM_ID",
        ),
        (
            vec![
                ("OXCCL_RANK", "0"),
                ("OXCCL_SIZE", "2"),
                ("OXCCL_COMM_ID", "oxccl1-garbage"),
            ],
            "OXCCL_COMM_ID",
        ),
    ] {
        let err = launch(&vars).expect_err("refused");
        assert_eq!(err.var, var, "{vars:?}: {err}");
    }
}

#[test]
fn the_file_rendezvous_publishes_the_id_and_removes_it_after_the_join() {
    let dir = std::env::temp_dir().join(format!("oxccl-rdv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_s = dir.display().to_string();
    let ranks = 3;
    let tables: Vec<JobTable> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..ranks)
            .map(|r| {
                let dir_s = dir_s.clone();
                s.spawn(move || {
                    let rank = r.to_string();
                    let l = launch(&[
                        ("OMPI_COMM_WORLD_RANK", rank.as_str()),
                        ("OMPI_COMM_WORLD_SIZE", "3"),
                        ("PMIX_NAMESPACE", "test.job"),
                        ("OXCCL_RENDEZVOUS_DIR", dir_s.as_str()),
                    ])
                    .unwrap()
                    .unwrap();
                    join_launch(&l, parts(3), QUICK).expect("joined")
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(tables.windows(2).all(|w| w[0] == w[1]));
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(
        left.is_empty(),
        "the rendezvous file is still there: {left:?}"
    );
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_rank_on_another_host_is_refused_listing_every_transport() {
    let id = loopback_id(2, QUICK);
    let config = crate::Config {
        transport: crate::transport::TransportChoice::Shm,
        ..crate::Config::default()
    };
    // What init_rank digests: the default topology of ranks with devices of their own.
    let pre = crate::Topology::default_for_device("host", vec![2]).expect("host");
    let pre = crate::communicator::ranks_apart(pre).expect("apart");
    let digests = digest_parts(&config, &pre, crate::Mode::Staged).expect("digests");
    let elsewhere = RankInfo {
        host: HostId {
            hostname: "node-b".into(),
            boot_id: "another-boot".into(),
        },
        ..RankInfo::this(1, digests)
    };
    let remote = std::thread::spawn(move || join(&id, 2, elsewhere, QUICK));
    let err = crate::Communicator::init_rank(&id, 2, 0, config).expect_err("no transport");
    let text = err.to_string();
    for says in [
        "rank 1 on host node-b",
        "in-process:",
        "shm:",
        "tcp: OXCCL_TRANSPORT=shm",
    ] {
        assert!(text.contains(says), "{says:?} in {text}");
    }
    remote.join().unwrap().expect("the other rank joined");
}

/// A job's table whose rank 0 shared `figures` (or nothing).
fn table_sharing(figures: Option<String>) -> JobTable {
    let first = RankInfo {
        host_figures: figures,
        ..RankInfo::this(0, parts(1))
    };
    JobTable {
        ranks: vec![first, RankInfo::this(1, parts(1))],
    }
}

#[test]
fn a_job_models_its_hosts_with_the_figures_its_rank_0_shared() {
    use oxccl_platform::host::calibration::HostFigures;
    let host = crate::Topology::default_for_device("host", vec![2]).expect("host");
    let config = crate::Config::default();
    // Rank 0 shares what it measured; the other ranks share nothing.
    let shared = crate::communicator::host_figures_to_share(&config, 0, &host);
    let text = shared.clone().expect("rank 0 measures its host");
    assert_eq!(
        crate::communicator::host_figures_to_share(&config, 1, &host),
        None
    );
    let figures = HostFigures::from_text(&text).expect("what rank 0 wrote reads back");
    let modelled =
        crate::communicator::job_host_figures(&config, &table_sharing(shared), host.clone())
            .expect("rank 0's figures apply");
    assert_eq!(modelled, host.clone().with_host_figures(&figures));
    assert_eq!(
        modelled.processor().map(|p| p.thread_gbps),
        Some(figures.thread_gbps)
    );
    // Rank 0 asked for the reference figures: nothing is shared, nothing changes.
    let reference = crate::Config {
        host_figures: crate::HostFiguresFrom::Reference,
        ..crate::Config::default()
    };
    assert_eq!(
        crate::communicator::host_figures_to_share(&reference, 0, &host),
        None
    );
    let kept = crate::communicator::job_host_figures(&config, &table_sharing(None), host.clone());
    assert_eq!(kept.expect("nothing to apply"), host);
    // A configured topology is the job's, whatever rank 0 measured.
    let given = crate::Config {
        topology: Some(host.clone()),
        ..crate::Config::default()
    };
    assert_eq!(
        crate::communicator::host_figures_to_share(&given, 0, &host),
        None
    );
    let file =
        crate::communicator::job_host_figures(&given, &table_sharing(Some(text)), host.clone());
    assert_eq!(file.expect("the file's figures"), host);
    // Figures this rank cannot read are an error, not another rank's model.
    let unreadable = table_sharing(Some("thread_gbps = fast".into()));
    let err = crate::communicator::job_host_figures(&config, &unreadable, host)
        .expect_err("unreadable figures")
        .to_string();
    assert!(
        err.contains("rank 0") && err.contains("same oxccl build"),
        "{err}"
    );
}
