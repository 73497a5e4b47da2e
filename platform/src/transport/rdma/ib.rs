//! Real RDMA devices through libibverbs (feature `rdma`): finding the device and port a
//! rank's RDMA links would leave from, with a typed error for each way that fails.
//!
//! Built on `ibverbs-sys` directly rather than the `ibverbs` crate: that crate's queue
//! pairs borrow their context (so they cannot live in a device beside it), and it has no
//! RDMA WRITE or registration of memory it did not allocate, both of which the transport
//! is made of. The verbs data path over real queue pairs ([`super::Verbs`] for a NIC) is
//! not written yet: nothing here could run it (no device, no soft-RoCE).

use super::{RdmaError, Settings};
use crate::transport::rdma::Port;
use ibverbs_sys as ffi;
use std::ffi::CStr;

/// The names of the RDMA devices libibverbs lists here (none when the kernel has no RDMA
/// subsystem).
pub fn device_names() -> Vec<String> {
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer; a null list means none (or no subsystem).
    let list = unsafe { ffi::ibv_get_device_list(&mut count) };
    if list.is_null() {
        return Vec::new();
    }
    let n = usize::try_from(count).unwrap_or(0);
    let names = (0..n)
        .map(|i| {
            // SAFETY: `list` holds `count` device pointers until it is freed below.
            let name = unsafe { ffi::ibv_get_device_name(*list.add(i)) };
            match name.is_null() {
                true => format!("device {i}"),
                // SAFETY: a non-null name is a NUL-terminated string owned by the list.
                false => unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned(),
            }
        })
        .collect();
    // SAFETY: `list` came from `ibv_get_device_list` and is freed once.
    unsafe { ffi::ibv_free_device_list(list) };
    names
}

/// The device and port `settings` name (the first device when none is named), checked
/// to exist and to be active.
pub fn probe(settings: &Settings) -> Result<Port, RdmaError> {
    let found = device_names();
    let name = match &settings.device {
        Some(wanted) if found.contains(wanted) => wanted.clone(),
        Some(wanted) => {
            return Err(RdmaError::NoDevice {
                wanted: Some(wanted.clone()),
                found,
            })
        }
        None => found.first().cloned().ok_or(RdmaError::NoDevice {
            wanted: None,
            found: Vec::new(),
        })?,
    };
    let port = Port {
        device: name,
        port: settings.port,
    };
    match port_state(&port)? {
        ffi::ibv_port_state::IBV_PORT_ACTIVE => Ok(port),
        state => Err(RdmaError::PortDown {
            state: state_name(state).into(),
            port,
        }),
    }
}

/// The state of `port`, from a context opened for the query.
fn port_state(port: &Port) -> Result<ffi::ibv_port_state::Type, RdmaError> {
    let failed = |what: &str| RdmaError::PortDown {
        port: port.clone(),
        state: format!("unreadable ({what})"),
    };
    let mut count = 0;
    // SAFETY: as in `device_names`; the list is freed on every path below.
    let list = unsafe { ffi::ibv_get_device_list(&mut count) };
    if list.is_null() {
        return Err(failed("the device list is gone"));
    }
    let n = usize::try_from(count).unwrap_or(0);
    let device = (0..n)
        // SAFETY: `list` holds `count` device pointers.
        .map(|i| unsafe { *list.add(i) })
        .find(|&d| {
            // SAFETY: `d` is a listed device; its name is NUL-terminated when not null.
            let name = unsafe { ffi::ibv_get_device_name(d) };
            !name.is_null() && unsafe { CStr::from_ptr(name) }.to_bytes() == port.device.as_bytes()
        });
    let result = match device {
        None => Err(failed("the device went away")),
        Some(device) => query(device, port.port).map_err(|e| failed(&e)),
    };
    // SAFETY: freed once, after the last use of its devices.
    unsafe { ffi::ibv_free_device_list(list) };
    result
}

/// Open `device`, read port `port`'s state, close it.
fn query(device: *mut ffi::ibv_device, port: u8) -> Result<ffi::ibv_port_state::Type, String> {
    // SAFETY: `device` comes from a live device list.
    let ctx = unsafe { ffi::ibv_open_device(device) };
    if ctx.is_null() {
        return Err(format!(
            "ibv_open_device: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut attr = ffi::ibv_port_attr::default();
    // SAFETY: `ctx` is open and `attr` a valid out-pointer of the type the call fills.
    let errno = unsafe { ffi::ibv_query_port(ctx, port, &mut attr as *mut _ as *mut _) };
    // SAFETY: opened above, closed once.
    unsafe { ffi::ibv_close_device(ctx) };
    match errno {
        0 => Ok(attr.state),
        e => Err(format!(
            "ibv_query_port: {}",
            std::io::Error::from_raw_os_error(e)
        )),
    }
}

fn state_name(state: ffi::ibv_port_state::Type) -> &'static str {
    match state {
        ffi::ibv_port_state::IBV_PORT_NOP => "in no state (NOP)",
        ffi::ibv_port_state::IBV_PORT_DOWN => "down",
        ffi::ibv_port_state::IBV_PORT_INIT => "initializing",
        ffi::ibv_port_state::IBV_PORT_ARMED => "armed",
        ffi::ibv_port_state::IBV_PORT_ACTIVE_DEFER => "active, deferred",
        _ => "in an unknown state",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a device (CI, this machine) the probe says so, naming what it found; with
    /// one (`OXCCL_RDMA_TEST_DEVICE` names it) the probe finds it active.
    #[test]
    fn the_probe_finds_the_named_device_or_says_there_is_none() {
        let settings = Settings::from_env().expect("settings");
        match std::env::var("OXCCL_RDMA_TEST_DEVICE") {
            Ok(device) => {
                let settings = Settings {
                    device: Some(device.clone()),
                    ..settings
                };
                let port = probe(&settings).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(port.device, device);
            }
            Err(_) if !device_names().is_empty() => {
                eprintln!(
                    "skipped: this machine has RDMA devices {:?}; name one in \
                     OXCCL_RDMA_TEST_DEVICE to probe it",
                    device_names()
                );
            }
            Err(_) => {
                let err = probe(&settings).unwrap_err();
                assert!(matches!(err, RdmaError::NoDevice { .. }), "{err}");
                let named = Settings {
                    device: Some("mlx5_9".into()),
                    ..settings
                };
                let err = probe(&named).unwrap_err().to_string();
                assert!(err.contains("mlx5_9") && err.contains("none"), "{err}");
            }
        }
    }
}
