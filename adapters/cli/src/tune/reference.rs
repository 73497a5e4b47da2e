//! `--reference`: an earlier run's table as a pick of its own, the pick check's noise
//! floor.
//!
//! On a shared machine a point moves between runs, so a pick can miss the 10% mark by
//! the noise alone. Checking the executor an earlier tune measured fastest at each size,
//! exactly as select_alg's pick is checked, tells the two apart: a model whose misses are
//! as many as a measurement's is as good as measuring. On the 2-core development machine
//! two full tunes (`--all -b 1K -e 64M -f 8`, 73 sizes each) gave the model 70 and 71,
//! and each run's fastest, checked in the other, 71 and 70; in a third, run with
//! `--reference` to the second's table, the model scored 69 and the table's fastest 67.

use super::sweep::{Job, Outcome, Pick};
use crate::validate::refused;
use oxccl::framework::tune::{TuneEntry, TuneTable};
use oxccl::Error;
use std::path::{Path, PathBuf};

/// A tuning table of an earlier run, and where it was read from.
#[derive(Debug)]
pub struct Reference {
    pub path: PathBuf,
    pub table: TuneTable,
}

impl Reference {
    /// The `--reference` table at `path`.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let table = TuneTable::load(path).map_err(|e| {
            let reason = "--reference must name a tuning table written by `oxccl tune`";
            refused("--reference", path.display(), reason, e)
        })?;
        Ok(Reference {
            path: path.to_path_buf(),
            table,
        })
    }
}

/// Per size of `outcome`, the executor `table` measured fastest for the series `job`
/// measures (operator, ranks, topology, dtype) at that size's bytes per rank, or why there
/// is none. Sizes with no measurement here have no bytes to look up and are left out.
pub fn reference_picks(job: &Job, outcome: &Outcome, table: &TuneTable) -> Vec<(usize, Pick)> {
    let topology = job.topology.describe();
    let series = |e: &&TuneEntry| {
        e.op == job.kind
            && e.ranks == job.topology.ranks()
            && e.topology == topology
            && e.dtype == job.dtype
    };
    let entries: Vec<&TuneEntry> = table.entries.iter().filter(series).collect();
    job.sizes
        .iter()
        .filter_map(|&size| {
            let bytes = outcome.at(size).next()?.entry.bytes;
            let fastest = entries
                .iter()
                .filter(|e| e.bytes == bytes)
                .min_by(|a, b| a.time_us.total_cmp(&b.time_us))
                .map(|e| e.executor.clone())
                .ok_or_else(|| format!("the table has no measurement of {bytes} B per rank"));
            Some((size, fastest))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::Settings;
    use crate::tune::sweep::point;
    use oxccl::{Config, DataType, OpKind, Topology};

    /// An AllReduce tune of 4 ranks over `sizes`, as [`point`] measures.
    fn job(sizes: Vec<usize>) -> Job {
        let settings = Settings {
            iters: 1,
            blocks: 1,
            warmup: 0,
            check: true,
            threads: 1,
            in_place: false,
            graph: None,
            skip_oom: true,
        };
        Job {
            kind: OpKind::AllReduce,
            dtype: DataType::F32,
            root: 0,
            sizes,
            settings,
            rounds: 1,
            contender_rounds: 0,
            decider_rounds: 0,
            config: Config::default(),
            topology: Topology::single_server(4),
        }
    }

    #[test]
    fn the_reference_pick_is_the_tables_fastest_of_the_same_series_and_bytes() {
        let job = job(vec![1024, 4096, 16384]);
        let outcome = Outcome {
            points: vec![point(1024, "ring", 9.0), point(4096, "ring", 9.0)],
            ..Outcome::default()
        };
        let mut table = TuneTable::default();
        let entry = |executor: &str, bytes, time_us| {
            let mut e = point(bytes, executor, time_us).entry;
            e.topology = job.topology.describe();
            e
        };
        table.entries.push(entry("mesh", 1024, 5.0));
        table.entries.push(entry("rhd", 1024, 4.0));
        // Faster, but of another dtype, another operator, another size.
        let mut other = entry("ring", 1024, 1.0);
        other.dtype = DataType::F16;
        table.entries.push(other);
        let mut other = entry("ring", 1024, 1.0);
        other.op = OpKind::AllGather;
        table.entries.push(other);
        table.entries.push(entry("ring", 2048, 1.0));
        let picks = reference_picks(&job, &outcome, &table);
        // 16384 was not measured in this run: no bytes to look up, no check.
        assert_eq!(picks.len(), 2);
        assert_eq!(picks[0], (1024, Ok("rhd".to_string())));
        let (size, missing) = &picks[1];
        assert_eq!(*size, 4096);
        assert!(
            missing.as_ref().unwrap_err().contains("4096 B per rank"),
            "{missing:?}"
        );
    }
}
