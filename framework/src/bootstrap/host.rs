//! Which host a rank runs on, so that the ranks sharing a host become one server of the
//! job's topology (and may share memory).
//!
//! A host is its **hostname and boot id**, as NCCL's `getHostHash` does: two containers
//! of one machine may share a hostname pattern but not a boot, and two machines that
//! share a name (a misconfigured cluster) do not share a boot id, so neither is taken for
//! the other. The boot id is the kernel's random per-boot UUID.

use serde::{Deserialize, Serialize};

/// Where the kernel publishes its per-boot UUID.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// Where the kernel publishes the hostname (no libc call needed).
const HOSTNAME: &str = "/proc/sys/kernel/hostname";

/// One host of a job.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HostId {
    pub hostname: String,
    /// The kernel's boot id (empty where the system does not publish one).
    pub boot_id: String,
}

impl HostId {
    /// This host.
    pub fn this() -> HostId {
        HostId {
            hostname: hostname().unwrap_or_else(|| "localhost".into()),
            boot_id: read_trimmed(BOOT_ID).unwrap_or_default(),
        }
    }

    /// The host a rank claims with `OXCCL_HOSTID` (see [`crate::Config::host_id`]): its
    /// name, with no boot id. Ranks claiming one name share memory.
    pub fn claimed(name: &str) -> HostId {
        HostId {
            hostname: name.to_string(),
            boot_id: String::new(),
        }
    }
}

impl std::fmt::Display for HostId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hostname)
    }
}

/// This host's name, from the kernel (or `HOSTNAME` where `/proc` is absent).
pub fn hostname() -> Option<String> {
    read_trimmed(HOSTNAME).or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
}

fn read_trimmed(path: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}
