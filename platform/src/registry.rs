//! The registry of backend kinds: how a device is created from a name.
//!
//! A backend registers itself with [`register_backend!`](crate::register_backend) (through
//! `inventory`, so a crate that links a new backend, a CUDA one say, adds a kind without
//! touching the framework); the framework's `Config` names the kind and [`create`] builds
//! it. An unknown kind is an error listing the known ones.

use crate::device::{Device, DeviceConfig};
use crate::error::{ConfigFault, DeviceError};
use std::sync::Arc;

/// One registered backend kind.
pub struct BackendEntry {
    /// The name `Config` uses (`host`, `sim`).
    pub kind: &'static str,
    /// One line on what it is.
    pub about: &'static str,
    /// Whose memory the ranks' copies use, which decides the machine the framework models
    /// the device on when no topology is given.
    pub memory: Memory,
    /// Create a device.
    pub create: fn(DeviceConfig) -> Result<Arc<dyn Device>, DeviceError>,
}

inventory::collect!(BackendEntry);

/// Whose memory a backend's ranks copy through.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Every rank has memory of its own, joined to its peers by links (NPUs, GPUs, and
    /// the `sim` device, which models such a machine).
    PerRank,
    /// The ranks are threads or processes of one CPU host: every copy of every rank
    /// crosses the same memory bus.
    SharedBus,
}

/// Register a backend kind: `register_backend!("host", "about", Memory::SharedBus, create_fn);`.
#[macro_export]
macro_rules! register_backend {
    ($kind:expr, $about:expr, $memory:expr, $create:expr) => {
        $crate::inventory::submit! {
            $crate::registry::BackendEntry {
                kind: $kind,
                about: $about,
                memory: $memory,
                create: $create,
            }
        }
    };
}

/// Every registered backend, sorted by kind.
pub fn backends() -> Vec<&'static BackendEntry> {
    let mut all: Vec<_> = inventory::iter::<BackendEntry>.into_iter().collect();
    all.sort_by_key(|b| b.kind);
    all
}

/// The names of every registered kind, sorted.
pub fn kinds() -> Vec<&'static str> {
    backends().into_iter().map(|b| b.kind).collect()
}

/// The memory of backend `kind`'s ranks (`None`: no such kind).
pub fn memory_of(kind: &str) -> Option<Memory> {
    backends()
        .into_iter()
        .find(|b| b.kind == kind)
        .map(|b| b.memory)
}

/// Create a device of kind `kind`.
pub fn create(kind: &str, config: DeviceConfig) -> Result<Arc<dyn Device>, DeviceError> {
    let entry = backends()
        .into_iter()
        .find(|b| b.kind == kind)
        .ok_or_else(|| ConfigFault::UnknownKind {
            kind: kind.to_string(),
            known: kinds(),
        })?;
    (entry.create)(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_kinds_create_and_an_unknown_kind_lists_them() {
        let expected: Vec<&str> = match cfg!(feature = "cuda") {
            true => vec!["cuda", "host", "sim"],
            false => vec!["host", "sim"],
        };
        assert_eq!(kinds(), expected);
        // The cuda kind needs a GPU (its own tests cover it).
        for kind in kinds().into_iter().filter(|k| *k != "cuda") {
            let device = create(kind, DeviceConfig::all_local(2)).unwrap();
            assert_eq!(device.kind(), kind);
        }
        let err = create("tpu", DeviceConfig::all_local(2)).unwrap_err();
        let DeviceError::Config(ConfigFault::UnknownKind { kind, known }) = &err else {
            panic!("{err:?}");
        };
        assert_eq!((kind.as_str(), known.clone()), ("tpu", expected));
        let text = std::error::Error::source(&err).unwrap().to_string();
        assert!(
            text.contains("\"tpu\"") && text.contains("host, sim"),
            "{text}"
        );
    }
}
