//! PTX kept on disk between processes: NVRTC takes about ten seconds per architecture for
//! the program kernel, which every process (every test binary, every rank of a job) would
//! otherwise pay again.
//!
//! A file `ptx-<key>.ptx` in the cache folder, the key a hash of everything the PTX
//! depends on (the source, the architecture, the NVRTC version, the options and the
//! header folder). The folder is `OXCCL_CUDA_CACHE` (`off` or empty: no disk cache), else
//! `$XDG_CACHE_HOME/oxccl`, else `$HOME/.cache/oxccl`. A file is written whole under a
//! temporary name and renamed, so a reader never sees half of one; anything that fails
//! (no home, a read-only folder, a damaged file) only means compiling again.

use std::path::{Path, PathBuf};

/// Whether `ptx` has the program kernel's entry point (a damaged or foreign file has not).
fn whole(ptx: &str) -> bool {
    ptx.contains(&format!(".entry {}(", super::kernels::PROGRAM_KERNEL))
}

/// The cache folder, from the environment as `var` reads it; `None`: no disk cache.
pub fn dir(var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(given) = var("OXCCL_CUDA_CACHE") {
        return match given.trim() {
            "" | "off" | "0" => None,
            path => Some(PathBuf::from(path)),
        };
    }
    if let Some(xdg) = var("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(xdg).join("oxccl"));
    }
    let home = var("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".cache").join("oxccl"))
}

/// The key of PTX made from `parts` (FNV-1a, 64 bits, over each part and its length:
/// stable across builds and Rust versions, unlike the std hasher).
pub fn key(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for part in parts {
        eat(&(part.len() as u64).to_le_bytes());
        eat(part.as_bytes());
    }
    format!("{h:016x}")
}

fn file(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("ptx-{key}.ptx"))
}

/// The PTX stored under `key`, if there is a whole one.
pub fn load(dir: &Path, key: &str) -> Option<String> {
    let ptx = std::fs::read_to_string(file(dir, key)).ok()?;
    whole(&ptx).then_some(ptx)
}

/// Store `ptx` under `key` (best effort: a cache).
pub fn store(dir: &Path, key: &str, ptx: &str) {
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!("ptx-{key}.{}.tmp", std::process::id()));
    if std::fs::write(&tmp, ptx).is_ok() && std::fs::rename(&tmp, file(dir, key)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_folder_follows_the_variable_then_xdg_then_home() {
        let all = [
            ("OXCCL_CUDA_CACHE", "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(dir(env(&all)), Some(PathBuf::from("/c")));
        assert_eq!(dir(env(&all[1..])), Some(PathBuf::from("/x/oxccl")));
        assert_eq!(dir(env(&all[2..])), Some(PathBuf::from("/h/.cache/oxccl")));
        assert_eq!(dir(env(&[])), None);
        for off in ["off", "", "0"] {
            assert_eq!(dir(env(&[("OXCCL_CUDA_CACHE", off), ("HOME", "/h")])), None);
        }
    }

    #[test]
    fn keys_differ_with_any_part_and_with_where_parts_split() {
        let k = key(&["src", "sm_90"]);
        assert_eq!(k, key(&["src", "sm_90"]));
        assert_ne!(k, key(&["src", "sm_80"]));
        assert_ne!(k, key(&["sr", "csm_90"]));
        assert_eq!(k.len(), 16);
    }

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
