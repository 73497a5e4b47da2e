//! `--algo-file PATH` (repeatable), shared by `oxccl check`, `perf`, `tune` and `algs`:
//! MSCCL-IR algorithm files, or folders of them (their `*.xml`), imported as executors
//! beside the registered ones ([`oxccl::framework::msccl`]), on top of what
//! `OXCCL_ALGO_FILES` names.
//!
//! The registry reads imported files when it is first built, so [`AlgoFiles::load`] runs
//! first thing in a command, before anything asks the registry, builds a communicator or
//! selects. Every file is read and checked then: a bad one stops the command with an error
//! naming the file, the line, and the gpu, threadblock and step at fault.
//!
//! Processes of a job import their files themselves: `perf --procs N` starts its ranks
//! with this command line (so with the same `--algo-file`s, relative paths resolved in the
//! same working directory) and environment (`OXCCL_ALGO_FILES`), and under `mpirun` every
//! rank parses its own. Ranks whose files differ are refused at init (the selection digest
//! holds every imported file's content).

use clap::Args;
use oxccl::framework::msccl;
use oxccl::{ConfigError, Error};
use std::path::PathBuf;

#[derive(Args, Debug, Default, Clone)]
pub struct AlgoFiles {
    /// An MSCCL-IR algorithm file (XML), or a folder of them (its *.xml files), to import as
    /// an executor (repeatable; added to OXCCL_ALGO_FILES). Without --algo, check and perf
    /// run the executor the files bring for the collective when they bring one (check
    /// --explain lets select_alg choose).
    #[arg(long = "algo-file", value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// No files: what a command that imports none (`calibrate`) has.
pub static NONE: AlgoFiles = AlgoFiles { paths: Vec::new() };

impl AlgoFiles {
    /// Read, check and import every file, for the registry to register when it is built.
    pub fn load(&self) -> Result<(), Error> {
        if self.paths.is_empty() {
            return Ok(());
        }
        self.folders_hold_files()?;
        msccl::add_algo_files(&self.paths)
    }

    /// The executor to run when `--algo` is not given: the one the `--algo-file`s bring
    /// for `collective`, if they bring exactly one (what the user came to check or
    /// measure); `None` otherwise, and select_alg decides. Called after
    /// [`AlgoFiles::load`].
    pub fn default_algo(&self, collective: Option<&str>) -> Result<Option<String>, Error> {
        let (Some(collective), false) = (collective, self.paths.is_empty()) else {
            return Ok(None);
        };
        let kind: oxccl::OpKind = collective.parse()?;
        let paths: Vec<String> = msccl::expand(&self.paths)?
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let mut brought = oxccl::registry()?
            .executors_for(kind)
            .filter(|e| e.file.is_some_and(|f| paths.contains(&f.path)));
        Ok(match (brought.next(), brought.next()) {
            (Some(only), None) => Some(only.name.to_string()),
            _ => None,
        })
    }

    /// Read and check every file as [`AlgoFiles::load`] does, importing none of them.
    #[cfg(test)]
    pub fn check(&self) -> Result<(), Error> {
        self.folders_hold_files()?;
        for path in msccl::expand(&self.paths)? {
            msccl::import_file(&path)?;
        }
        Ok(())
    }

    /// A folder that holds no `*.xml` file is a mistake (a wrong folder, or files named
    /// otherwise), not a request for nothing.
    fn folders_hold_files(&self) -> Result<(), Error> {
        for path in self.paths.iter().filter(|p| p.is_dir()) {
            if msccl::expand(std::slice::from_ref(path))?.is_empty() {
                let reason = "the folder holds no *.xml file; name the MSCCL-IR files or \
                              their folder";
                return Err(
                    ConfigError::new("--algo-file", path.display().to_string(), reason).into(),
                );
            }
        }
        Ok(())
    }
}
