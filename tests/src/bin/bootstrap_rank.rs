//! One rank of the multi-process bootstrap tests (`tests/tests/bootstrap.rs`): joins the
//! job its launcher started (`OXCCL_RANK`/`OXCCL_SIZE`/`OXCCL_COMM_ID`, or mpirun's
//! variables and the rendezvous file) with the selection digests of its `OXCCL_*`
//! configuration, and prints one line: `rank R pid P table <hosts and pids>`; or, refused,
//! `rank R refused: <error and causes>` on stderr with exit status 1.

use oxccl::framework::bootstrap::{self, Launch};
use oxccl::framework::error::chain;
use oxccl::{Config, Mode, Topology};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let launch = match Launch::from_env() {
        Ok(Some(launch)) => launch,
        Ok(None) => {
            eprintln!("no launcher variables set (OXCCL_RANK, OMPI_COMM_WORLD_RANK, ...)");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let digests = Config::from_env()
        .map_err(oxccl::Error::from)
        .and_then(|config| {
            let topology = Topology::single_server(launch.size);
            bootstrap::digest_parts(&config, &topology, Mode::Staged)
        });
    let digests = match digests {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rank {}: {e}", launch.rank);
            return ExitCode::from(2);
        }
    };
    match bootstrap::join_launch(&launch, digests, Duration::from_secs(60)) {
        Ok(table) => {
            let hosts: Vec<Vec<usize>> = table.hosts().into_iter().map(|(_, r)| r).collect();
            let pids: Vec<u32> = table.ranks.iter().map(|i| i.pid).collect();
            println!(
                "rank {} pid {} table hosts {hosts:?} pids {pids:?}",
                launch.rank,
                std::process::id()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            let causes: Vec<String> = chain(&e).map(|c| c.to_string()).collect();
            eprintln!("rank {} refused: {}", launch.rank, causes.join(": "));
            ExitCode::from(1)
        }
    }
}
