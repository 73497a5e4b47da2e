//! PTX kept on disk between processes: NVRTC takes about ten seconds per architecture for
//! the program kernel, which every process (every test binary, every rank of a job) would
//! otherwise pay again.
//!
//! A file `ptx-<key>.ptx` in the cache folder, the key a hash of everything the PTX
//! depends on (the source, the architecture, the NVRTC version, the options and the
//! header folder), kept by [`crate::disk_cache`] in the folder `OXCCL_CUDA_CACHE` names
//! (`off` or empty: no disk cache), else the user's cache folder. Anything that fails (no
//! home, a read-only folder, a damaged file) only means compiling again.

use std::path::{Path, PathBuf};

/// Whether `ptx` has the program kernel's entry point (a damaged or foreign file has not).
fn whole(ptx: &str) -> bool {
    ptx.contains(&format!(".entry {}(", super::kernels::PROGRAM_KERNEL))
}

/// The cache folder, from the environment as `var` reads it; `None`: no disk cache.
pub fn dir(var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    crate::disk_cache::dir(Some("OXCCL_CUDA_CACHE"), var)
}

pub use crate::disk_cache::key;

/// The name of the file holding the PTX of `key`.
fn name(key: &str) -> String {
    format!("ptx-{key}.ptx")
}

fn file(dir: &Path, key: &str) -> PathBuf {
    dir.join(name(key))
}

/// The PTX stored under `key`, if there is a whole one.
pub fn load(dir: &Path, key: &str) -> Option<String> {
    let ptx = std::fs::read_to_string(file(dir, key)).ok()?;
    whole(&ptx).then_some(ptx)
}

/// Store `ptx` under `key` (best effort: a cache).
pub fn store(dir: &Path, key: &str, ptx: &str) {
    crate::disk_cache::store(dir, &name(key), ptx);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_ptx_loads_back_and_a_damaged_file_does_not() {
        let dir = std::env::temp_dir().join(format!("oxccl-ptx-test-{}", std::process::id()));
        let ptx = format!(
            "// test\n.entry {}(\n",
            super::super::kernels::PROGRAM_KERNEL
        );
        store(&dir, "k1", &ptx);
        assert_eq!(load(&dir, "k1").as_deref(), Some(ptx.as_str()));
        assert_eq!(load(&dir, "k2"), None);
        std::fs::write(dir.join("ptx-k3.ptx"), "half a fi").unwrap();
        assert_eq!(load(&dir, "k3"), None);
        let leftovers = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "tmp")
            })
            .count();
        assert_eq!(leftovers, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
