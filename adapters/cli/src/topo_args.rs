//! `--ranks`, `--topo` and `--broken`, shared by `oxccl check`, `perf` and `tune`.
//!
//! `--topo` takes what `Topology::parse_spec` takes (a preset such as `mesh8`, `2x8`,
//! `1xN`, or a TOML file); every `--broken A-B` marks one more link broken on top of it.
//! `--ranks` given with a topology must agree with its rank count, in every command.

use oxccl::framework::topology::PRESETS;
use oxccl::{Error, Topology};

/// Ranks of a command given neither `--ranks` nor a topology.
const DEFAULT_RANKS: usize = 8;

fn bad_arg(var: &'static str, value: &str, reason: String) -> Error {
    oxccl::ConfigError::new(var, value, reason).into()
}

/// The help of `--topo`, listing the built-in presets, followed by what a command without
/// `--topo` uses.
pub fn topo_help(default: &str) -> String {
    let presets: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
    format!(
        "Topology: a preset ({}) or a TOML file (default: {default})",
        presets.join(", ")
    )
}

/// The topology named by `topo` (or one server of `ranks` ranks, 8 by default), with every
/// `broken` link applied; `ranks` given with `topo` must agree with it.
pub fn topology(
    ranks: Option<usize>,
    topo: Option<&str>,
    broken: &[String],
) -> Result<Topology, Error> {
    let base = match topo {
        Some(spec) => agreeing(ranks, parse_topo(spec)?, &format!("--topo {spec}"))?,
        None => {
            let n = crate::validate::rank_count(ranks.unwrap_or(DEFAULT_RANKS))?;
            Topology::servers(vec![n])?
        }
    };
    with_broken(base, broken)
}

/// `--topo spec`, parsed.
fn parse_topo(spec: &str) -> Result<Topology, Error> {
    Topology::parse_spec(spec).map_err(|e| {
        crate::validate::refused(
            "--topo",
            spec,
            oxccl::framework::config::TOPOLOGY_REFUSED,
            e,
        )
    })
}

/// `base` (from `source`), unless `--ranks` was given and disagrees with it.
fn agreeing(ranks: Option<usize>, base: Topology, source: &str) -> Result<Topology, Error> {
    match ranks.filter(|&n| n != base.ranks()) {
        None => Ok(base),
        Some(n) => {
            let reason = format!(
                "disagrees with {source}, which has {} ranks; drop --ranks or pass --ranks {}",
                base.ranks(),
                base.ranks()
            );
            Err(bad_arg("--ranks", &n.to_string(), reason))
        }
    }
}

/// `base` with every `A-B` of `broken` marked broken.
pub fn with_broken(base: Topology, broken: &[String]) -> Result<Topology, Error> {
    broken.iter().try_fold(base, |t, pair| {
        let parsed = pair
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
        let (a, b) = parsed
            .ok_or_else(|| bad_arg("--broken", pair, "expected two ranks like 0-1".into()))?;
        Ok(t.with_broken(a, b)?)
    })
}

/// The topology of a command that runs for real (`perf`, `tune`) on backend `device`:
/// `--topo` if given, else the environment's (`OXCCL_TOPO_FILE`), else what a
/// communicator of `--ranks` ranks (8 by default) gets on that device
/// ([`Topology::default_for_device`]: a CPU host for the host device); then `--broken`.
/// `--ranks` given with a topology must agree with its rank count.
pub fn run_topology(
    ranks: Option<usize>,
    topo: Option<&str>,
    broken: &[String],
    from_env: Option<&Topology>,
    device: &str,
) -> Result<Topology, Error> {
    let base = match (topo, from_env) {
        (Some(_), _) => return topology(ranks, topo, broken),
        (None, Some(env)) => agreeing(ranks, env.clone(), "OXCCL_TOPO_FILE")?,
        (None, None) => {
            let n = crate::validate::rank_count(ranks.unwrap_or(DEFAULT_RANKS))?;
            Topology::default_for_device(device, vec![n])?
        }
    };
    with_broken(base, broken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_topo_must_agree() {
        let t = run_topology(Some(8), Some("mesh8"), &["0-1".into()], None, "host").unwrap();
        assert_eq!(t.describe(), "[8] broken 0-1");
        let err = run_topology(Some(4), Some("mesh8"), &[], None, "host").unwrap_err();
        assert!(
            err.to_string()
                .contains("--ranks=\"4\" is invalid: disagrees"),
            "{err}"
        );
        let env = Topology::single_server(4);
        assert!(run_topology(Some(8), None, &[], Some(&env), "host").is_err());
        assert_eq!(
            run_topology(None, None, &[], Some(&env), "host")
                .unwrap()
                .ranks(),
            4
        );
        assert_eq!(
            run_topology(None, None, &[], None, "host").unwrap().ranks(),
            8
        );
        assert!(run_topology(None, None, &["0_1".into()], None, "host").is_err());
        // What `oxccl check` builds: the same agreement, without a device.
        let err = topology(Some(4), Some("mesh8"), &[]).unwrap_err();
        assert!(
            err.to_string().contains("disagrees with --topo mesh8"),
            "{err}"
        );
        assert_eq!(topology(Some(8), Some("mesh8"), &[]).unwrap().ranks(), 8);
        assert_eq!(topology(None, None, &[]).unwrap().ranks(), 8);
        assert_eq!(topology(Some(3), None, &[]).unwrap().ranks(), 3);
        for ranks in [0, 4097, usize::MAX] {
            let err = run_topology(Some(ranks), None, &[], None, "host").unwrap_err();
            assert!(err.to_string().starts_with("--ranks"), "{err}");
        }
        let err = topology(None, Some("1x99999999999"), &[]).unwrap_err();
        let chain = oxccl::framework::error::with_causes(&err);
        assert!(chain.contains("at most 4096"), "{chain}");
        let err = topology(None, Some("/no/such/topology.toml"), &[]).unwrap_err();
        let io = oxccl::framework::error::chain(&err)
            .find_map(|e| e.downcast_ref::<std::io::Error>())
            .expect("the io::Error is in the chain");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    }
}
