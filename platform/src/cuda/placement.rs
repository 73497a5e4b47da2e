//! Which GPU each local rank runs on.
//!
//! `DeviceConfig::gpus` (`OXCCL_CUDA_DEVICES`) decides when it is given: one ordinal for
//! every local rank (`0`: all on GPU 0, as virtual ranks), one per local rank, or — in a
//! job of processes — one per rank of the host, of which this process takes its own.
//! Otherwise ranks go round-robin over the machine's GPUs starting at this process's
//! place among its host's ranks (its `LOCAL_RANK`): an in-process communicator's ranks
//! spread over the GPUs, and a job of one process per GPU (`torchrun`, `mpirun` with
//! as many processes per host as GPUs) puts each process on a GPU of its own.

use super::CudaError;
use crate::device::DeviceConfig;

/// The ordinal of each local rank (by its index in `config.local_ranks`) on a machine of
/// `count` GPUs.
pub(super) fn placement(config: &DeviceConfig, count: usize) -> Result<Vec<usize>, CudaError> {
    let local = config.local_ranks.len();
    let first = host_index(config);
    let ordinals: Vec<usize> = match config.gpus.as_slice() {
        [] => (0..local).map(|i| (first + i) % count.max(1)).collect(),
        [one] => vec![*one; local],
        many if many.len() == local => many.to_vec(),
        many if first
            .checked_add(local)
            .is_some_and(|end| end <= many.len()) =>
        {
            many[first..first + local].to_vec()
        }
        many => {
            return Err(CudaError::Placement {
                given: many.len(),
                local,
                first,
            })
        }
    };
    for (i, &ordinal) in ordinals.iter().enumerate() {
        if ordinal >= count {
            return Err(CudaError::NoDevice {
                rank: config.local_ranks.get(i).copied().unwrap_or(i),
                ordinal,
                count,
            });
        }
    }
    Ok(ordinals)
}

/// Where this device's first local rank stands among the ranks of its host (ranks of
/// processes on a host of the same name, in rank order): its `LOCAL_RANK`. 0 when the
/// job's processes are unknown (an in-process communicator).
fn host_index(config: &DeviceConfig) -> usize {
    let Some(&first) = config.local_ranks.first() else {
        return 0;
    };
    let Some(mine) = config.processes.get(first) else {
        return 0;
    };
    config.processes[..first]
        .iter()
        .filter(|p| p.host == mine.host)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::RankProcess;

    /// Rank `rank` of a job of one process per rank, on hosts named `hosts[r]`.
    fn job(rank: usize, hosts: &[&str], gpus: &[usize]) -> DeviceConfig {
        DeviceConfig {
            local_ranks: vec![rank],
            processes: hosts
                .iter()
                .map(|h| RankProcess {
                    pid: 1,
                    host: h.to_string(),
                })
                .collect(),
            gpus: gpus.to_vec(),
            ..DeviceConfig::all_local(hosts.len())
        }
    }

    #[test]
    fn an_in_process_communicator_goes_round_robin_from_gpu_0() {
        let config = DeviceConfig::all_local(5);
        assert_eq!(placement(&config, 2).unwrap(), vec![0, 1, 0, 1, 0]);
        let all_on_1 = DeviceConfig {
            gpus: vec![1],
            ..config.clone()
        };
        assert_eq!(placement(&all_on_1, 2).unwrap(), vec![1; 5]);
        let each = DeviceConfig {
            gpus: vec![1, 1, 0, 0, 1],
            ..config
        };
        assert_eq!(placement(&each, 2).unwrap(), vec![1, 1, 0, 0, 1]);
    }

    #[test]
    fn a_process_per_rank_takes_the_gpu_of_its_local_rank() {
        let hosts = ["a", "a", "a", "a", "b", "b", "b", "b"];
        let on = |rank, gpus: &[usize], count| placement(&job(rank, &hosts, gpus), count);
        // Round-robin from the rank's place on its host: 4 GPUs per host, one each.
        let placed: Vec<usize> = (0..8).map(|r| on(r, &[], 4).unwrap()[0]).collect();
        assert_eq!(placed, vec![0, 1, 2, 3, 0, 1, 2, 3]);
        // Two GPUs for four processes: two processes share each.
        let placed: Vec<usize> = (0..8).map(|r| on(r, &[], 2).unwrap()[0]).collect();
        assert_eq!(placed, vec![0, 1, 0, 1, 0, 1, 0, 1]);
        // A list for the host's ranks: each process takes its own entry.
        let placed: Vec<usize> = (0..8)
            .map(|r| on(r, &[3, 2, 1, 0], 4).unwrap()[0])
            .collect();
        assert_eq!(placed, vec![3, 2, 1, 0, 3, 2, 1, 0]);
        // One ordinal: every process on it.
        assert_eq!(on(6, &[2], 4).unwrap(), vec![2]);
    }

    #[test]
    fn a_list_too_short_for_the_host_or_an_ordinal_past_the_machine_is_refused() {
        let hosts = ["a", "a", "a"];
        let err = placement(&job(2, &hosts, &[0, 1]), 4).unwrap_err();
        assert!(
            matches!(
                err,
                CudaError::Placement {
                    given: 2,
                    local: 1,
                    first: 2
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("OXCCL_CUDA_DEVICES"), "{err}");
        let err = placement(&job(1, &hosts, &[0, 5, 0]), 4).unwrap_err();
        assert!(
            matches!(
                err,
                CudaError::NoDevice {
                    rank: 1,
                    ordinal: 5,
                    count: 4
                }
            ),
            "{err:?}"
        );
    }
}
