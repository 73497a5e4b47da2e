//! A stable digest of everything that decides select_alg's choice, so ranks can compare
//! one number when they connect.
//!
//! Every rank, in any process, must reach the same selection for the same call, or their
//! programs do not meet. Selection is a pure function of shared inputs (see
//! [`crate::select`]): the **registry** (every executor entry: operator, name, crate,
//! constraints, preference, and an imported one's file content) and the plugin selectors (name, priority); the **tuning
//! table**; the **topology** (servers, both fabrics with their link specs and wiring, the
//! NIC, per-pair overrides, broken links); and the **planning configuration** (CCL buffer
//! bytes, link channels, mode, the `OXCCL_ALGO` override). [`selection_digest`] folds all
//! of them into 64 bits; two ranks whose digests differ were built or configured
//! differently, and a job must refuse to start rather than deadlock on its first call.
//!
//! The hash is FNV-1a over an explicit, versioned encoding (little-endian integers,
//! length-prefixed strings, floats by their bits, a tag byte before each field group), not
//! `std`'s `DefaultHasher`, whose output may change between Rust releases and builds.
//! Registry entries are fed in the registry's sorted order and tuning entries in table
//! order (a table's order is part of its meaning: later entries merge over earlier ones),
//! so link order and hash-map order never show.

use crate::executor::{Constraints, ExecutorEntry, LinkNeed, Mode};
use crate::select::{AlgoOverride, SelectorEntry};
use crate::topology::{Fabric, LinkSpec, Topology};
use crate::tune::TuneTable;

/// Version of the encoding: bumped whenever what is fed, or how, changes.
const ENCODING: u64 = 2;

/// A 64-bit FNV-1a hasher with a fixed, documented encoding of the values it is fed.
#[derive(Clone, Debug)]
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest::new()
    }
}

impl Digest {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// A digest of nothing yet (FNV's offset basis).
    pub fn new() -> Digest {
        Digest(Self::OFFSET)
    }

    /// Feed raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
        self
    }

    /// Feed an integer (as 8 little-endian bytes).
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Feed a `usize` (as a `u64`, so 32- and 64-bit hosts agree).
    pub fn usize(&mut self, v: usize) -> &mut Self {
        self.u64(v as u64)
    }

    /// Feed a float by its bits (`-0.0` and `0.0` differ; every NaN is fed as one).
    pub fn f64(&mut self, v: f64) -> &mut Self {
        let bits = if v.is_nan() {
            f64::NAN.to_bits()
        } else {
            v.to_bits()
        };
        self.u64(bits)
    }

    /// Feed a string, length first, so `("ab", "c")` and `("a", "bc")` differ.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.usize(s.len()).bytes(s.as_bytes())
    }

    /// Feed an optional value: a presence byte, then the value.
    pub fn option<T>(&mut self, v: Option<T>, mut f: impl FnMut(&mut Self, T)) -> &mut Self {
        match v {
            None => self.bytes(&[0]),
            Some(v) => {
                self.bytes(&[1]);
                f(self, v);
                self
            }
        }
    }

    /// The digest so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// The planning configuration that selection reads.
#[derive(Copy, Clone, Debug)]
pub struct PlanningConfig<'a> {
    /// Bytes of each CCL buffer.
    pub ccl_bytes: usize,
    /// Notify channels per link.
    pub link_channels: usize,
    /// How the orchestration loop binds buffers.
    pub mode: Mode,
    /// The `OXCCL_ALGO` override.
    pub algo: &'a AlgoOverride,
}

/// Everything select_alg's choice depends on, for [`selection_digest`].
#[derive(Copy, Clone)]
pub struct SelectionInputs<'a> {
    /// The registered executors, in any order (they are sorted before hashing).
    pub executors: &'a [&'static ExecutorEntry],
    /// The plugin selectors, in any order.
    pub selectors: &'a [&'static SelectorEntry],
    pub tune: Option<&'a TuneTable>,
    pub topology: &'a Topology,
    pub config: PlanningConfig<'a>,
}

/// `f` of the selection inputs of a communicator configured with `config`, on `topology`,
/// in `mode`: the registry as linked into this binary, and the plugin selectors.
pub fn with_inputs_of<T>(
    config: &crate::Config,
    topology: &Topology,
    mode: Mode,
    f: impl FnOnce(&SelectionInputs<'_>) -> T,
) -> Result<T, crate::Error> {
    let executors: Vec<_> = crate::registry::registry()?.executors().collect();
    let selectors: Vec<_> = crate::select::SELECTORS.iter().collect();
    Ok(f(&SelectionInputs {
        executors: &executors,
        selectors: &selectors,
        tune: config.tune.as_deref(),
        topology,
        config: PlanningConfig {
            ccl_bytes: config.ccl_buffer_bytes,
            link_channels: config.link_channels,
            mode,
            algo: &config.algo,
        },
    }))
}

/// The stable 64-bit digest of `inputs` (see the module doc).
pub fn selection_digest(inputs: &SelectionInputs<'_>) -> u64 {
    let mut d = Digest::new();
    d.str("oxccl selection inputs").u64(ENCODING);
    executors(&mut d, inputs.executors);
    selectors(&mut d, inputs.selectors);
    d.bytes(b"T").option(inputs.tune, tune);
    topology(&mut d, inputs.topology);
    config(&mut d, &inputs.config);
    d.finish()
}

/// The digest of each selection input on its own, named (`registry`: executors and
/// selectors; `tuning`; `topology`; `planning`), so that ranks which disagree learn which
/// input differs ([`crate::bootstrap`] compares them part by part).
pub fn selection_digest_parts(inputs: &SelectionInputs<'_>) -> [(&'static str, u64); 4] {
    let part = |name: &str, feed: &dyn Fn(&mut Digest)| {
        let mut d = Digest::new();
        d.str("oxccl selection input").u64(ENCODING).str(name);
        feed(&mut d);
        d.finish()
    };
    [
        (
            "registry",
            part("registry", &|d| {
                executors(d, inputs.executors);
                selectors(d, inputs.selectors);
            }),
        ),
        (
            "tuning",
            part("tuning", &|d| {
                d.bytes(b"T").option(inputs.tune, tune);
            }),
        ),
        (
            "topology",
            part("topology", &|d| topology(d, inputs.topology)),
        ),
        ("planning", part("planning", &|d| config(d, &inputs.config))),
    ]
}

fn executors(d: &mut Digest, entries: &[&'static ExecutorEntry]) {
    let mut sorted = entries.to_vec();
    sorted.sort_by(|a, b| (a.op.name(), a.name).cmp(&(b.op.name(), b.name)));
    d.bytes(b"E").usize(sorted.len());
    for e in sorted {
        d.str(e.op.name()).str(e.name).str(e.crate_name);
        d.u64(e.preference as i64 as u64);
        constraints(d, &e.constraints);
        // An imported executor is what its file says: two ranks whose files of one name
        // differ would build different programs.
        d.option(e.file.map(|f| f.content), |d, content| {
            d.u64(content);
        });
    }
}

fn constraints(d: &mut Digest, c: &Constraints) {
    d.usize(c.min_ranks).usize(c.max_ranks);
    d.bytes(&[u8::from(c.full_mesh)]);
    d.option(c.max_bytes, |d, b| {
        d.usize(b);
    });
    d.option(c.min_bytes, |d, b| {
        d.usize(b);
    });
    d.usize(c.min_servers).usize(c.count_unit);
    d.usize(c.fixed_links.len());
    for &(a, b) in c.fixed_links {
        d.usize(a).usize(b);
    }
    d.option(c.root, |d, r| {
        d.usize(r);
    });
    d.usize(c.link_channels);
    d.bytes(&[match c.links {
        LinkNeed::LoadStore => 0,
        LinkNeed::LoadStoreWithinServer => 1,
        LinkNeed::Put => 2,
    }]);
}

fn selectors(d: &mut Digest, entries: &[&'static SelectorEntry]) {
    let mut sorted = entries.to_vec();
    sorted.sort_by(|a, b| (a.name, a.priority).cmp(&(b.name, b.priority)));
    d.bytes(b"S").usize(sorted.len());
    for s in sorted {
        d.str(s.name).u64(s.priority as i64 as u64);
    }
}

fn tune(d: &mut Digest, table: &TuneTable) {
    d.usize(table.entries.len());
    for e in &table.entries {
        d.str(e.op.name()).usize(e.ranks).str(&e.topology);
        d.str(e.dtype.name())
            .usize(e.bytes)
            .str(&e.executor)
            .f64(e.time_us);
    }
}

fn topology(d: &mut Digest, t: &Topology) {
    d.bytes(b"P").usize(t.server_sizes().len());
    for &size in t.server_sizes() {
        d.usize(size);
    }
    fabric(d, t.intra());
    fabric(d, t.inter());
    d.option(t.nic_gbps(), |d, g| {
        d.f64(g).str(t.nic_scope().name());
    });
    d.option(t.memory_gbps(), |d, g| {
        d.f64(g);
    });
    d.option(t.processor(), |d, p| {
        d.usize(p.workers)
            .f64(p.task_us)
            .f64(p.wake_us)
            .f64(p.thread_gbps)
            .usize(p.inline_bytes)
            .usize(p.split_bytes)
            .str(p.ranks.name())
            .usize(p.cache_bytes)
            .f64(p.cache_gbps)
            .usize(p.llc_bytes)
            .f64(p.forward_gbps);
    });
    let overrides: Vec<_> = t.overrides().collect();
    d.usize(overrides.len());
    for (&(a, b), pair) in overrides {
        d.usize(a).usize(b);
        spec(d, &pair.up);
        spec(d, &pair.down);
    }
    let broken: Vec<_> = t.broken_links().collect();
    d.usize(broken.len());
    for (a, b) in broken {
        d.usize(a).usize(b);
    }
}

fn fabric(d: &mut Digest, f: &Fabric) {
    spec(d, &f.spec);
    d.str(f.wiring.name());
}

fn spec(d: &mut Digest, s: &LinkSpec) {
    d.str(&format!("{:?}", s.kind));
    d.f64(s.bandwidth_gbps).f64(s.latency_us);
    // What a link lets a rank do decides which executors can run at all.
    d.str(s.access.name());
}

fn config(d: &mut Digest, c: &PlanningConfig<'_>) {
    d.bytes(b"C").usize(c.ccl_bytes).usize(c.link_channels);
    d.bytes(&[match c.mode {
        Mode::Staged => 0,
        Mode::Direct => 1,
    }]);
    let entries: Vec<_> = c.algo.entries().collect();
    d.usize(entries.len());
    for (op, name) in entries {
        d.option(op, |d, op| {
            d.str(op.name());
        });
        d.str(name);
    }
}

#[cfg(test)]
mod tests;
