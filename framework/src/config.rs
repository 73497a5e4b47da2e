//! Communicator configuration, and the one place that reads oxccl's environment.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OXCCL_ALGO` | executor override per operator: `all_reduce=ring;all_gather=mesh`, or a bare name for every operator that has it | none |
//! | `OXCCL_BUFFSIZE` | size of each CCL buffer (CclIn and CclOut) per rank, MiB | 32 |
//! | `OXCCL_EXEC_TIMEOUT` | seconds a Wait may block before it is an error | 60 |
//! | `OXCCL_HOST_THREADS` | worker threads of the host device; 0 = one per core | 0 |
//! | `OXCCL_ZERO_COPY` | 1: eager ops run on user buffers when the device allows it; 0: always stage through the CCL buffers | 1 |
//! | `OXCCL_TOPO_FILE` | the communicator's topology: a preset (`mesh8`, `2x8`, `1xN`...) or a TOML file | one server, full mesh |
//! | `OXCCL_TUNE_FILE` | a tuning table written by `oxccl tune` (see [`crate::tune`]): `select_alg` runs the fastest measured executor for sizes it covers | none (the model decides) |
//! | `OXCCL_CHECK_CALLS` | 1: ranks agree on every call (operator, type, op, root, counts, executor) before it runs, and a mismatch is an error on every rank (see [`crate::agreement`]); 0: skip the check | 1 |
//! | `OXCCL_LOG` | `tracing` filter (`info`, `oxccl=debug`, ...) | off |
//!
//! The default CCL buffer is 32 MiB rather than HCCL's 200 MB: on the host device every
//! rank is in this process, so 8 ranks hold 16 buffers (512 MiB of address space, committed
//! only as used), and staging larger chunks buys nothing once a chunk is well past the
//! caches.

use crate::error::ConfigError;
use crate::select::AlgoOverride;
use crate::topology::Topology;
use crate::tune::TuneTable;
use std::time::Duration;

/// Which backend a communicator runs on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    /// Threads of this process on CPU cores (the default).
    Host,
    /// Record programs for the analyzer instead of running them. `remote_user_buffers`
    /// selects the eager mode (zero-copy when true, staged otherwise).
    Sim { remote_user_buffers: bool },
}

/// Everything a communicator is created with.
#[derive(Clone, Debug)]
pub struct Config {
    pub ccl_buffer_bytes: usize,
    pub exec_timeout: Duration,
    pub host_threads: usize,
    pub algo: AlgoOverride,
    pub zero_copy: bool,
    /// Ranks agree on every call before it runs (`OXCCL_CHECK_CALLS`, see
    /// [`crate::agreement`]).
    pub check_calls: bool,
    pub log_filter: Option<String>,
    pub device: DeviceChoice,
    /// The topology; `None` means one server with all ranks fully connected.
    pub topology: Option<Topology>,
    /// Notify channels per link; at least 2 (the end-of-operation Close handshake uses
    /// channels 0 and 1, see `orchestrate`).
    pub link_channels: usize,
    /// Measured executor times (`OXCCL_TUNE_FILE`, written by `oxccl tune`) that
    /// `select_alg` prefers over the cost model.
    pub tune: Option<std::sync::Arc<crate::tune::TuneTable>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ccl_buffer_bytes: 32 << 20,
            exec_timeout: Duration::from_secs(60),
            host_threads: 0,
            algo: AlgoOverride::default(),
            zero_copy: true,
            check_calls: true,
            log_filter: None,
            device: DeviceChoice::Host,
            topology: None,
            link_channels: 2,
            tune: None,
        }
    }
}

fn parse_num<T: std::str::FromStr>(var: &'static str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.trim().parse::<T>().map_err(|e| ConfigError {
        var,
        value: value.to_string(),
        reason: e.to_string(),
    })
}

/// A 1/0 switch (`true`/`false`, `on`/`off` too).
fn parse_switch(var: &'static str, value: String) -> Result<bool, ConfigError> {
    match value.trim() {
        "1" | "true" | "on" => Ok(true),
        "0" | "false" | "off" => Ok(false),
        _ => Err(ConfigError {
            var,
            value,
            reason: "use 1 or 0".into(),
        }),
    }
}

/// The tuning table named by `OXCCL_TUNE_FILE`; a bad file names the variable, the path,
/// the line and what was wrong.
fn load_tune_file(value: &str) -> Result<TuneTable, ConfigError> {
    let bad = |reason: String| ConfigError {
        var: "OXCCL_TUNE_FILE",
        value: value.to_string(),
        reason,
    };
    let path = value.trim();
    if path.is_empty() {
        return Err(bad(
            "name a tuning table written by `oxccl tune`, or unset the variable".into(),
        ));
    }
    TuneTable::load(path).map_err(|e| bad(e.to_string()))
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
            let mib: usize = parse_num("OXCCL_BUFFSIZE", &v)?;
            if mib == 0 || mib > (1 << 20) {
                return Err(ConfigError {
                    var: "OXCCL_BUFFSIZE",
                    value: v,
                    reason: "must be between 1 and 1048576 MiB".into(),
                });
            }
            config.ccl_buffer_bytes = mib << 20;
        }
        if let Some(v) = get("OXCCL_EXEC_TIMEOUT") {
            let secs: f64 = parse_num("OXCCL_EXEC_TIMEOUT", &v)?;
            if !(secs > 0.0 && secs < 1e9) {
                return Err(ConfigError {
                    var: "OXCCL_EXEC_TIMEOUT",
                    value: v,
                    reason: "must be a positive number of seconds".into(),
                });
            }
            config.exec_timeout = Duration::from_secs_f64(secs);
        }
        if let Some(v) = get("OXCCL_HOST_THREADS") {
            config.host_threads = parse_num("OXCCL_HOST_THREADS", &v)?;
        }
        if let Some(v) = get("OXCCL_ZERO_COPY") {
            config.zero_copy = parse_switch("OXCCL_ZERO_COPY", v)?;
        }
        if let Some(v) = get("OXCCL_CHECK_CALLS") {
            config.check_calls = parse_switch("OXCCL_CHECK_CALLS", v)?;
        }
        if let Some(v) = get("OXCCL_ALGO") {
            config.algo = v.parse()?;
        }
        if let Some(v) = get("OXCCL_TOPO_FILE") {
            let topology = Topology::parse_spec(v.trim()).map_err(|e| ConfigError {
                var: "OXCCL_TOPO_FILE",
                value: v.clone(),
                reason: e.to_string(),
            })?;
            config.topology = Some(topology);
        }
        if let Some(v) = get("OXCCL_TUNE_FILE") {
            config.tune = Some(std::sync::Arc::new(load_tune_file(&v)?));
        }
        config.log_filter = get("OXCCL_LOG").filter(|v| !v.trim().is_empty());
        Ok(config)
    }
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
            ("OXCCL_LOG", "debug"),
        ]))
        .unwrap();
        assert_eq!(c.ccl_buffer_bytes, 4 << 20);
        assert_eq!(c.exec_timeout, Duration::from_millis(500));
        assert_eq!(c.host_threads, 3);
        assert!(!c.zero_copy);
        assert_eq!(c.log_filter.as_deref(), Some("debug"));
        let c = Config::from_lookup(env(&[("OXCCL_TOPO_FILE", "2x8")])).unwrap();
        assert_eq!(c.topology.map(|t| t.ranks()), Some(16));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (var, value) in [
            ("OXCCL_BUFFSIZE", "0"),
            ("OXCCL_BUFFSIZE", "lots"),
            ("OXCCL_EXEC_TIMEOUT", "-1"),
            ("OXCCL_HOST_THREADS", "x"),
            ("OXCCL_ZERO_COPY", "maybe"),
            ("OXCCL_TOPO_FILE", "/no/such/file.toml"),
            ("OXCCL_TUNE_FILE", "/no/such/tune.txt"),
            ("OXCCL_TUNE_FILE", " "),
        ] {
            let err = Config::from_lookup(env(&[(var, value)])).unwrap_err();
            assert_eq!(err.var, var);
            assert!(err.to_string().contains(var), "{err}");
        }
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
        let message = err.to_string();
        assert_eq!(err.var, "OXCCL_TUNE_FILE");
        for needle in ["OXCCL_TUNE_FILE", good.to_str().unwrap(), "line 3", "slow"] {
            assert!(message.contains(needle), "{needle:?} not in {message}");
        }
    }
}
