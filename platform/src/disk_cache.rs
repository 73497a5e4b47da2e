//! Files kept on disk between processes: what is slow to make and the same for every
//! process of a machine (the CUDA backend's kernel module, the host's measured figures).
//!
//! The folder is the one a variable names (`off`, `0` or empty: no disk cache), else
//! `$XDG_CACHE_HOME/oxccl`, else `$HOME/.cache/oxccl`. A file is written whole under a
//! temporary name and renamed, so a reader never sees half of one. Everything here is
//! best effort: a folder that cannot be made or written only means making the thing
//! again.

use std::path::{Path, PathBuf};

/// The cache folder, from the environment as `var` reads it: the folder `given` names
/// when it is set, else the user's cache folder; `None`: no disk cache.
pub fn dir(given: Option<&str>, var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(value) = given.and_then(&var) {
        return match value.trim() {
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

/// A key made from `parts` (FNV-1a, 64 bits, over each part and its length: stable
/// across builds and Rust versions, unlike the std hasher), 16 hex digits.
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

/// Write `contents` as `dir/name`, whole or not at all (best effort: a cache).
pub fn store(dir: &Path, name: &str, contents: &[u8]) {
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    if std::fs::write(&tmp, contents).is_ok() && std::fs::rename(&tmp, dir.join(name)).is_err() {
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
        let all = [("OXCCL_X", "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
        let given = Some("OXCCL_X");
        assert_eq!(dir(given, env(&all)), Some(PathBuf::from("/c")));
        assert_eq!(dir(None, env(&all)), Some(PathBuf::from("/x/oxccl")));
        assert_eq!(dir(given, env(&all[1..])), Some(PathBuf::from("/x/oxccl")));
        assert_eq!(
            dir(given, env(&all[2..])),
            Some(PathBuf::from("/h/.cache/oxccl"))
        );
        assert_eq!(dir(given, env(&[])), None);
        for off in ["off", "", "0"] {
            assert_eq!(dir(given, env(&[("OXCCL_X", off), ("HOME", "/h")])), None);
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
    fn a_stored_file_is_whole_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("oxccl-disk-cache-{}", std::process::id()));
        store(&dir, "a.txt", b"first");
        store(&dir, "a.txt", b"second");
        assert_eq!(
            std::fs::read_to_string(dir.join("a.txt")).unwrap(),
            "second"
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.txt")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
