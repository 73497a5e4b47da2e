//! Rank, size and rendezvous from the launchers people already use.
//!
//! oxccl has no launcher of its own beyond a convenience (`oxccl perf --procs N`): a job
//! is started by `mpirun`, `torchrun` or Slurm, and each process learns its rank and the
//! job's size from the launcher's variables. The first launcher whose variables are all
//! present wins, in this order:
//!
//! | launcher | rank | size | local rank | job identity |
//! |---|---|---|---|---|
//! | oxccl (`--procs`) | `OXCCL_RANK` | `OXCCL_SIZE` | `OXCCL_LOCAL_RANK` | the id itself |
//! | OpenMPI `mpirun` | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` | `PMIX_NAMESPACE` |
//! | `torchrun` | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` | `TORCHELASTIC_RUN_ID` |
//! | Slurm `srun` | `SLURM_PROCID` | `SLURM_NTASKS` | `SLURM_LOCALID` | `SLURM_JOB_ID`.`SLURM_STEP_ID` |
//!
//! The **rendezvous** (how every rank gets the job's [`UniqueId`]):
//!
//! - `OXCCL_COMM_ID` set to a whole id (`oxccl1-...@host:port`, what `--procs` passes):
//!   every rank joins it; whoever made it runs the root.
//! - `OXCCL_COMM_ID=host:port` (NCCL's `NCCL_COMM_ID`): rank 0 starts the root listening
//!   there; the secret is derived from the address, the size and the job identity, so it
//!   keeps out programs that do not know the job, not someone who can read the job's
//!   environment (pass a whole id for that).
//! - `torchrun` without `OXCCL_COMM_ID`: as the previous, at `MASTER_ADDR` and port
//!   `MASTER_PORT + 1` (`MASTER_PORT` itself is PyTorch's store).
//! - `mpirun` and Slurm without `OXCCL_COMM_ID`: rank 0 creates the id and publishes it in
//!   a **file**, `oxccl-<job identity>.id` in `OXCCL_RENDEZVOUS_DIR` (default `TMPDIR`,
//!   else `/tmp`), written whole (a temporary name, then a rename) and readable by its
//!   owner only; the other ranks wait for it, and rank 0 removes it once every rank has
//!   joined. The directory must be shared by the job's hosts (one host, or a shared file
//!   system); otherwise set `OXCCL_COMM_ID`.

use super::error::BootstrapError;
use super::id::{resolve, Secret, UniqueId};
use crate::error::ConfigError;
use oxccl_platform::Rank;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a rank looks for the rendezvous file.
const FILE_POLL: Duration = Duration::from_millis(10);

/// Who started the process.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// `oxccl ... --procs N`.
    Oxccl,
    OpenMpi,
    Torchrun,
    Slurm,
}

impl Launcher {
    /// The launcher's name, as the README writes it.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Oxccl => "oxccl --procs",
            Launcher::OpenMpi => "mpirun (OpenMPI)",
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "Slurm",
        }
    }
}

/// How the ranks of this launch get the job's id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// The whole id, given.
    Id(UniqueId),
    /// Rank 0 runs the root at this `host:port`.
    Address(String),
    /// Rank 0 publishes the id in this file.
    File(PathBuf),
}

/// One process of a launched job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub launcher: Launcher,
    pub rank: Rank,
    pub size: usize,
    /// The rank among those of its host, when the launcher says.
    pub local_rank: Option<usize>,
    pub rendezvous: Rendezvous,
    /// What tells this job from others started by the same launcher (part of the derived
    /// secret and of the rendezvous file's name).
    pub job: String,
}

/// The variables of one launcher: rank, size, local rank, and those naming the job.
struct Vars {
    launcher: Launcher,
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
    job: &'static [&'static str],
}

const LAUNCHERS: [Vars; 4] = [
    Vars {
        launcher: Launcher::Oxccl,
        rank: "OXCCL_RANK",
        size: "OXCCL_SIZE",
        local_rank: "OXCCL_LOCAL_RANK",
        job: &[],
    },
    Vars {
        launcher: Launcher::OpenMpi,
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        job: &["PMIX_NAMESPACE"],
    },
    Vars {
        launcher: Launcher::Torchrun,
        rank: "RANK",
        size: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
        job: &["TORCHELASTIC_RUN_ID"],
    },
    Vars {
        launcher: Launcher::Slurm,
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        job: &["SLURM_JOB_ID", "SLURM_STEP_ID"],
    },
];

impl Launch {
    /// This process's launch, from the environment; `None` when no launcher's variables
    /// are set (an in-process job).
    pub fn from_env() -> Result<Option<Launch>, ConfigError> {
        Self::from_lookup(|var| std::env::var(var).ok())
    }

    /// As [`Launch::from_env`], reading variables through `get`.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Launch>, ConfigError> {
        let Some(vars) = LAUNCHERS
            .iter()
            .find(|v| get(v.rank).is_some() && get(v.size).is_some())
        else {
            return Ok(None);
        };
        let number = |var: &'static str| -> Result<Option<usize>, ConfigError> {
            get(var)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        ConfigError::new(
                            var,
                            &v,
                            "expected a whole number, as the launcher sets it",
                        )
                    })
                })
                .transpose()
        };
        let size = number(vars.size)?.unwrap_or(0);
        let rank = number(vars.rank)?.unwrap_or(0);
        if size == 0 || rank >= size {
            let value = get(vars.rank).unwrap_or_default();
            let reason = format!("the rank must be below {} = {size}", vars.size);
            return Err(ConfigError::new(vars.rank, &value, reason));
        }
        let job = vars
            .job
            .iter()
            .filter_map(|v| get(v))
            .collect::<Vec<_>>()
            .join(".");
        let rendezvous = rendezvous(vars.launcher, &get, &job)?;
        Ok(Some(Launch {
            launcher: vars.launcher,
            rank,
            size,
            local_rank: number(vars.local_rank)?,
            rendezvous,
            job,
        }))
    }

    /// The job's id: given, or made by rank 0 (which starts the root) and found by the
    /// others, as [`Launch::rendezvous`] says. Every wait is bounded by `timeout`.
    pub fn unique_id(&self, timeout: Duration) -> Result<UniqueId, BootstrapError> {
        match &self.rendezvous {
            Rendezvous::Id(id) => Ok(*id),
            Rendezvous::Address(spec) => {
                let root = resolve(spec)?;
                let secret = Secret::derived(&[spec, &self.size.to_string(), &self.job]);
                match self.rank {
                    0 => UniqueId::listen(root, secret, self.size, timeout),
                    _ => Ok(UniqueId {
                        root,
                        secret,
                        ranks: self.size,
                    }),
                }
            }
            Rendezvous::File(path) => match self.rank {
                0 => publish(path, self.size, timeout),
                _ => read_published(path, timeout),
            },
        }
    }

    /// After this rank joined: rank 0 removes the rendezvous file (every rank has read it).
    pub fn joined(&self) {
        if let (Rendezvous::File(path), 0) = (&self.rendezvous, self.rank) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Where the ranks of a launch meet (see the module docs).
fn rendezvous(
    launcher: Launcher,
    get: &impl Fn(&str) -> Option<String>,
    job: &str,
) -> Result<Rendezvous, ConfigError> {
    if let Some(v) = get("OXCCL_COMM_ID") {
        return match v.trim().starts_with("oxccl") {
            true => v
                .parse()
                .map(Rendezvous::Id)
                .map_err(|e| ConfigError::new("OXCCL_COMM_ID", &v, "not a unique id").caused_by(e)),
            false if v.contains(':') => Ok(Rendezvous::Address(v.trim().to_string())),
            false => Err(ConfigError::new(
                "OXCCL_COMM_ID",
                &v,
                "expected host:port, or a whole id `oxccl1-...@host:port`",
            )),
        };
    }
    match launcher {
        Launcher::Torchrun => torchrun_address(get).map(Rendezvous::Address),
        Launcher::Oxccl => Err(ConfigError::new(
            "OXCCL_COMM_ID",
            "",
            "OXCCL_RANK and OXCCL_SIZE need OXCCL_COMM_ID (the id `oxccl --procs` passes)",
        )),
        Launcher::OpenMpi | Launcher::Slurm => {
            let dir = get("OXCCL_RENDEZVOUS_DIR")
                .or_else(|| get("TMPDIR"))
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| "/tmp".into());
            let name = job.replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "_");
            Ok(Rendezvous::File(
                Path::new(&dir).join(format!("oxccl-{name}.id")),
            ))
        }
    }
}

/// `MASTER_ADDR:(MASTER_PORT + 1)`.
fn torchrun_address(get: &impl Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let addr = get("MASTER_ADDR").ok_or_else(|| {
        ConfigError::new(
            "MASTER_ADDR",
            "",
            "torchrun sets it; or set OXCCL_COMM_ID=host:port",
        )
    })?;
    let port = get("MASTER_PORT").unwrap_or_default();
    let next = port
        .trim()
        .parse::<u16>()
        .ok()
        .and_then(|p| p.checked_add(1))
        .ok_or_else(|| ConfigError::new("MASTER_PORT", &port, "expected a port below 65535"))?;
    Ok(format!("{}:{next}", addr.trim()))
}

/// Rank 0: create the id and write it to `path` whole, readable by its owner only.
fn publish(path: &Path, size: usize, timeout: Duration) -> Result<UniqueId, BootstrapError> {
    let id = UniqueId::create(size, timeout)?;
    let failed = |what, e: std::io::Error| BootstrapError::RendezvousFile {
        path: path.display().to_string(),
        what,
        source: Arc::new(e),
    };
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    write_private(&tmp, id.to_string().as_bytes()).map_err(|e| failed("writing", e))?;
    std::fs::rename(&tmp, path).map_err(|e| failed("renaming into place", e))?;
    Ok(id)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// The other ranks: wait for rank 0's file and read the id.
fn read_published(path: &Path, timeout: Duration) -> Result<UniqueId, BootstrapError> {
    let deadline = Instant::now() + timeout;
    loop {
        match std::fs::read_to_string(path) {
            Ok(text) => return text.parse(),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(BootstrapError::RendezvousFile {
                    path: path.display().to_string(),
                    what: "reading",
                    source: Arc::new(e),
                })
            }
            Err(_) if Instant::now() >= deadline => {
                return Err(BootstrapError::NoRendezvousFile {
                    path: path.display().to_string(),
                    waited: timeout,
                })
            }
            Err(_) => std::thread::sleep(FILE_POLL),
        }
    }
}
