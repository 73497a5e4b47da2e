//! A small builder of MSCCL-IR files: `<algo>` holds one `<gpu>` per rank, a gpu holds
//! threadblocks (`<tb>`, an ordered list of steps with at most one send peer and one
//! receive peer), and a `<step>` moves or combines `cnt` consecutive chunks.
//!
//! The builder fills in what follows from the rest, when the XML is written:
//! - `s` (the step's index in its threadblock) and the threadblock ids;
//! - `hasdep`, set exactly on the steps another step depends on (a step may override it,
//!   for the broken files);
//! - the destination of `s` and `rrs` steps, which store nothing locally and name where
//!   the receiver stores the data: it is copied from the matching receive (through chains
//!   of `rrs`), matching the k-th send of a (channel, sender, receiver) with its k-th
//!   receive;
//! - the source of `r` and `rcs` steps, which read no local buffer: it is their
//!   destination, so every offset in a file lies inside its buffer.

use super::{Coll, Dialect, Params, Proto};
use std::collections::HashMap;
use std::fmt::Write as _;

/// A gpu's buffers: input, output and scratch.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    I,
    O,
    S,
}

impl Buf {
    pub fn code(self) -> &'static str {
        match self {
            Buf::I => "i",
            Buf::O => "o",
            Buf::S => "s",
        }
    }

    pub fn from_code(code: &str) -> Option<Buf> {
        Some(match code {
            "i" => Buf::I,
            "o" => Buf::O,
            "s" => Buf::S,
            _ => return None,
        })
    }
}

/// A chunk of a buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Loc {
    pub buf: Buf,
    pub off: usize,
}

/// Input chunk `off`.
pub const fn i(off: usize) -> Loc {
    Loc { buf: Buf::I, off }
}

/// Output chunk `off`.
pub const fn o(off: usize) -> Loc {
    Loc { buf: Buf::O, off }
}

/// Scratch chunk `off`.
pub const fn s(off: usize) -> Loc {
    Loc { buf: Buf::S, off }
}

/// The step types.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ty {
    /// Send src to the send peer.
    S,
    /// Receive from the receive peer into dst.
    R,
    /// Receive, store into dst and send on.
    Rcs,
    /// Receive, reduce with src and send the result on (stored nowhere).
    Rrs,
    /// Receive, reduce with src, store into dst.
    Rrc,
    /// Receive, reduce with src, store into dst and send on.
    Rrcs,
    /// Copy src to dst.
    Cpy,
    /// dst = dst (op) src.
    Re,
    /// Nothing; carries a dependency.
    Nop,
}

impl Ty {
    pub const ALL: [Ty; 9] = [
        Ty::S,
        Ty::R,
        Ty::Rcs,
        Ty::Rrs,
        Ty::Rrc,
        Ty::Rrcs,
        Ty::Cpy,
        Ty::Re,
        Ty::Nop,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Ty::S => "s",
            Ty::R => "r",
            Ty::Rcs => "rcs",
            Ty::Rrs => "rrs",
            Ty::Rrc => "rrc",
            Ty::Rrcs => "rrcs",
            Ty::Cpy => "cpy",
            Ty::Re => "re",
            Ty::Nop => "nop",
        }
    }

    pub fn from_code(code: &str) -> Option<Ty> {
        Ty::ALL.into_iter().find(|t| t.code() == code)
    }

    /// Sends to the threadblock's send peer.
    pub fn sends(self) -> bool {
        matches!(self, Ty::S | Ty::Rcs | Ty::Rrs | Ty::Rrcs)
    }

    /// Receives from the threadblock's receive peer.
    pub fn receives(self) -> bool {
        matches!(self, Ty::R | Ty::Rcs | Ty::Rrs | Ty::Rrc | Ty::Rrcs)
    }

    /// Its destination is remote (where the receiver stores the data), not written here.
    pub(super) fn remote_dst(self) -> bool {
        matches!(self, Ty::S | Ty::Rrs)
    }
}

/// A step, named by its threadblock's index on its gpu and its index in the threadblock.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepRef {
    pub tb: usize,
    pub step: usize,
}

/// A step as built.
#[derive(Clone, Debug)]
pub struct Step {
    pub ty: Ty,
    pub src: Loc,
    /// None until resolved, for `s` and `rrs` (see the module's documentation).
    pub dst: Option<Loc>,
    pub cnt: usize,
    pub dep: Option<StepRef>,
    /// Overrides the computed `hasdep` (broken files only).
    pub hasdep: Option<bool>,
}

/// A threadblock.
#[derive(Clone, Debug)]
pub struct Tb {
    pub send: Option<usize>,
    pub recv: Option<usize>,
    pub chan: usize,
    pub steps: Vec<Step>,
}

/// A gpu.
#[derive(Clone, Debug)]
pub struct Gpu {
    pub i_chunks: usize,
    pub o_chunks: usize,
    pub s_chunks: usize,
    pub tbs: Vec<Tb>,
}

/// A whole algorithm.
#[derive(Clone, Debug)]
pub struct Program {
    pub name: String,
    pub coll: Coll,
    pub dialect: Dialect,
    pub proto: Proto,
    pub nchannels: usize,
    pub nchunksperloop: usize,
    /// Written as `root` for rooted collectives when not 0.
    pub root: usize,
    /// Overrides `ngpus` (broken files only).
    pub ngpus_attr: Option<usize>,
    pub gpus: Vec<Gpu>,
}

/// Methods of [`Program`] that append one step of a type, `name(rank, tb, locations...,
/// cnt, dep)`, each only saying which of its locations are the step's source and
/// destination.
macro_rules! simple_steps {
    ($($(#[$doc:meta])* $name:ident: $ty:ident($($loc:ident),+) => ($src:expr, $dst:expr);)*) => {
        $(
            $(#[$doc])*
            #[allow(clippy::too_many_arguments)]
            pub fn $name(
                &mut self,
                rank: usize,
                tb: usize,
                $($loc: Loc,)+
                cnt: usize,
                dep: Option<StepRef>,
            ) -> StepRef {
                self.step(rank, tb, Ty::$ty, $src, $dst, cnt, dep)
            }
        )*
    };
}

impl Program {
    /// An empty program named `<coll>-<form>-<ranks>` for `p`, with `chunks` chunks a
    /// loop and the collective's buffer sizes on every gpu (no scratch yet).
    pub fn new(coll: Coll, form: &str, p: &Params, chunks: usize) -> Program {
        let n = p.ranks;
        assert!(
            !coll.blocked() || chunks.is_multiple_of(n),
            "{coll:?} needs nchunksperloop to be a multiple of ngpus"
        );
        assert!(!coll.rooted() || p.root < n, "root {} on {n} ranks", p.root);
        let gpu = Gpu {
            i_chunks: coll.in_chunks(chunks, n),
            o_chunks: coll.out_chunks(chunks, n),
            s_chunks: 0,
            tbs: Vec::new(),
        };
        Program {
            name: format!("{}-{form}-{n}", coll.stem()),
            coll,
            dialect: p.dialect,
            proto: p.proto,
            nchannels: p.channels,
            nchunksperloop: chunks,
            root: if coll.rooted() { p.root } else { 0 },
            ngpus_attr: None,
            gpus: vec![gpu; n],
        }
    }

    pub fn ranks(&self) -> usize {
        self.gpus.len()
    }

    /// A new threadblock on `rank`; returns its index.
    pub fn tb(
        &mut self,
        rank: usize,
        send: Option<usize>,
        recv: Option<usize>,
        chan: usize,
    ) -> usize {
        assert!(
            chan < self.nchannels,
            "channel {chan} of {}",
            self.nchannels
        );
        let tbs = &mut self.gpus[rank].tbs;
        tbs.push(Tb {
            send,
            recv,
            chan,
            steps: Vec::new(),
        });
        tbs.len() - 1
    }

    /// `cnt` chunks of scratch on `rank`; returns the first.
    pub fn scratch(&mut self, rank: usize, cnt: usize) -> usize {
        let gpu = &mut self.gpus[rank];
        gpu.s_chunks += cnt;
        gpu.s_chunks - cnt
    }

    /// Appends a step to threadblock `tb` of `rank`.
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        rank: usize,
        tb: usize,
        ty: Ty,
        src: Loc,
        dst: Option<Loc>,
        cnt: usize,
        dep: Option<StepRef>,
    ) -> StepRef {
        let steps = &mut self.gpus[rank].tbs[tb].steps;
        steps.push(Step {
            ty,
            src,
            dst,
            cnt,
            dep,
            hasdep: None,
        });
        StepRef {
            tb,
            step: steps.len() - 1,
        }
    }

    simple_steps! {
        /// `s`: send `src` (the destination is the matching receive's).
        send: S(src) => (src, None);
        /// `r`: receive into `dst`.
        recv: R(dst) => (dst, Some(dst));
        /// `rcs`: receive into `dst` and send on.
        rcs: Rcs(dst) => (dst, Some(dst));
        /// `rrs`: receive, reduce with `src`, send on.
        rrs: Rrs(src) => (src, None);
        /// `rrc`: receive, reduce with `src`, store into `dst`.
        rrc: Rrc(src, dst) => (src, Some(dst));
        /// `rrcs`: receive, reduce with `src`, store into `dst` and send on.
        rrcs: Rrcs(src, dst) => (src, Some(dst));
        /// `cpy`: copy `src` to `dst`.
        cpy: Cpy(src, dst) => (src, Some(dst));
        /// `re`: `dst = dst (op) src`.
        re: Re(src, dst) => (src, Some(dst));
    }

    /// `nop`: wait for `dep`.
    pub fn nop(&mut self, rank: usize, tb: usize, dep: Option<StepRef>) -> StepRef {
        self.step(rank, tb, Ty::Nop, i(0), Some(o(0)), 0, dep)
    }

    /// The last step of threadblock `tb` of `rank`.
    pub fn last(&self, rank: usize, tb: usize) -> StepRef {
        let n = self.gpus[rank].tbs[tb].steps.len();
        assert!(n > 0, "threadblock {tb} of gpu {rank} has no steps");
        StepRef { tb, step: n - 1 }
    }

    /// Fills in the destinations of `s` and `rrs` steps from their matching receives.
    pub fn resolve(&mut self) {
        type Key = (usize, usize, usize);
        type At = (usize, usize, usize);
        let mut sends: HashMap<Key, Vec<At>> = HashMap::new();
        let mut recvs: HashMap<Key, Vec<At>> = HashMap::new();
        for (g, gpu) in self.gpus.iter().enumerate() {
            for (t, tb) in gpu.tbs.iter().enumerate() {
                for (s, step) in tb.steps.iter().enumerate() {
                    if let (true, Some(to)) = (step.ty.sends(), tb.send) {
                        sends.entry((tb.chan, g, to)).or_default().push((g, t, s));
                    }
                    if let (true, Some(from)) = (step.ty.receives(), tb.recv) {
                        recvs.entry((tb.chan, from, g)).or_default().push((g, t, s));
                    }
                }
            }
        }
        let pairs: Vec<(At, At)> = sends
            .iter()
            .flat_map(|(key, ss)| {
                let rs = recvs.get(key).map(Vec::as_slice).unwrap_or(&[]);
                ss.iter().copied().zip(rs.iter().copied())
            })
            .collect();
        loop {
            let mut changed = false;
            for &((sg, st, ss), (rg, rt, rs)) in &pairs {
                if self.gpus[sg].tbs[st].steps[ss].dst.is_some() {
                    continue;
                }
                if let Some(dst) = self.gpus[rg].tbs[rt].steps[rs].dst {
                    self.gpus[sg].tbs[st].steps[ss].dst = Some(dst);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// The file's text.
    pub fn to_xml(&self) -> String {
        let mut prog = self.clone();
        prog.resolve();
        prog.write()
    }

    fn write(&self) -> String {
        let mut depended = vec![Vec::new(); self.gpus.len()];
        for (g, gpu) in self.gpus.iter().enumerate() {
            for tb in &gpu.tbs {
                for step in &tb.steps {
                    if let Some(d) = step.dep {
                        depended[g].push(d);
                    }
                }
            }
            depended[g].sort_unstable();
            depended[g].dedup();
        }
        let steps: usize = self
            .gpus
            .iter()
            .flat_map(|g| &g.tbs)
            .map(|t| t.steps.len())
            .sum();
        let mut out = String::with_capacity(200 + steps * 120);
        write!(
            out,
            "<algo name=\"{}\" proto=\"{}\" nchannels=\"{}\" nchunksperloop=\"{}\" ngpus=\"{}\" \
             coll=\"{}\" inplace=\"0\"",
            self.name,
            self.proto.attr(),
            self.nchannels,
            self.nchunksperloop,
            self.ngpus_attr.unwrap_or(self.gpus.len()),
            self.coll.coll_attr(self.dialect),
        )
        .unwrap();
        if let Dialect::Msccl {
            min_bytes,
            max_bytes,
        } = self.dialect
        {
            write!(
                out,
                " outofplace=\"1\" minBytes=\"{min_bytes}\" maxBytes=\"{max_bytes}\""
            )
            .unwrap();
        }
        if self.coll.rooted() && self.root != 0 {
            write!(out, " root=\"{}\"", self.root).unwrap();
        }
        out.push_str(">\n");
        let peer = |p: Option<usize>| p.map_or(-1, |p| p as i64);
        for (g, gpu) in self.gpus.iter().enumerate() {
            writeln!(
                out,
                "  <gpu id=\"{g}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{}\">",
                gpu.i_chunks, gpu.o_chunks, gpu.s_chunks
            )
            .unwrap();
            for (t, tb) in gpu.tbs.iter().enumerate() {
                writeln!(
                    out,
                    "    <tb id=\"{t}\" send=\"{}\" recv=\"{}\" chan=\"{}\">",
                    peer(tb.send),
                    peer(tb.recv),
                    tb.chan
                )
                .unwrap();
                for (s, step) in tb.steps.iter().enumerate() {
                    let dst = step.dst.unwrap_or(step.src);
                    let (depid, deps) = step.dep.map_or((-1, -1), |d| (d.tb as i64, d.step as i64));
                    let hasdep = step.hasdep.unwrap_or_else(|| {
                        depended[g]
                            .binary_search(&StepRef { tb: t, step: s })
                            .is_ok()
                    });
                    writeln!(
                        out,
                        "      <step s=\"{s}\" type=\"{}\" srcbuf=\"{}\" srcoff=\"{}\" \
                         dstbuf=\"{}\" dstoff=\"{}\" cnt=\"{}\" depid=\"{depid}\" \
                         deps=\"{deps}\" hasdep=\"{}\"/>",
                        step.ty.code(),
                        step.src.buf.code(),
                        step.src.off,
                        dst.buf.code(),
                        dst.off,
                        step.cnt,
                        u8::from(hasdep)
                    )
                    .unwrap();
                }
                out.push_str("    </tb>\n");
            }
            out.push_str("  </gpu>\n");
        }
        out.push_str("</algo>\n");
        out
    }

    /// How many `s` and `rrs` steps found no receive to take their destination from
    /// (0 for every generator; a broken file may have some, written with their source).
    pub fn unresolved(&self) -> usize {
        let mut prog = self.clone();
        prog.resolve();
        prog.gpus
            .iter()
            .flat_map(|g| &g.tbs)
            .flat_map(|t| &t.steps)
            .filter(|s| s.ty.remote_dst() && s.dst.is_none())
            .count()
    }
}
