//! What ranks compare about one call, and the comparison.

use super::Deposit;
use crate::communicator::ScratchUse;
use crate::error::Error;
use crate::op::{OpKind, OpParam, P2pItem, VLayout};
use oxccl_platform::{DataType, Rank, ReduceOp};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// One rank's view of a call: the fields every rank of the call must agree on.
#[derive(Clone, Debug)]
pub struct Signature {
    pub rank: Rank,
    pub kind: OpKind,
    pub dtype: DataType,
    /// The reduce op of the operators that reduce.
    pub op: Option<ReduceOp>,
    pub root: Option<Rank>,
    /// Elements per rank of the fixed-size operators.
    pub count: usize,
    pub layout: Option<Arc<VLayout>>,
    /// The executor this rank's `select_alg` chose; `None` for a call with no work.
    pub executor: Option<&'static str>,
    /// This rank's scratch request and the peers whose scratch it touches (empty for a
    /// call with no work): compared pair by pair, since scratch is symmetric.
    pub scratch: ScratchUse,
}

impl Signature {
    /// The signature of `rank`'s call `op`, run by `executor`.
    pub fn new(rank: Rank, op: &OpParam, executor: Option<&'static str>) -> Self {
        Signature {
            rank,
            kind: op.kind,
            dtype: op.dtype,
            op: op.kind.reduces().then_some(op.op),
            root: op.root,
            count: op.count,
            layout: op.layout.clone(),
            executor,
            scratch: ScratchUse::default(),
        }
    }

    /// The signature with this rank's use of scratch.
    pub fn with_scratch(self, scratch: ScratchUse) -> Self {
        Signature { scratch, ..self }
    }

    /// Whether `other` agrees with this signature on every field but the layout (which
    /// [`layouts_differ`] compares, pair by pair for point-to-point operators).
    fn same_call(&self, other: &Signature) -> bool {
        fn counts(s: &Signature) -> Option<&[usize]> {
            s.layout.as_deref().and_then(VLayout::blocks).map(|b| b.0)
        }
        (self.kind, self.dtype, self.op, self.root, self.executor)
            == (
                other.kind,
                other.dtype,
                other.op,
                other.root,
                other.executor,
            )
            && (self.layout.is_some() || self.count == other.count)
            && counts(self) == counts(other)
    }

    /// Every compared field, in order, as `(name, value)`: the first that differs
    /// between two ranks is the one reported. Vector layouts are compared separately.
    fn fields(&self) -> [(&'static str, String); 5] {
        let count = match self.layout.as_deref() {
            Some(VLayout::Blocks { counts, .. }) => format!("counts {counts:?}"),
            Some(VLayout::P2p { .. }) => String::from("per-peer counts"),
            None => format!("count {}", self.count),
        };
        [
            ("operator", self.kind.to_string()),
            ("data type", self.dtype.to_string()),
            (
                "reduce op",
                self.op.map_or("none".into(), |o| format!("{o:?}")),
            ),
            ("root", self.root.map_or("none".into(), |r| r.to_string())),
            ("count", count),
        ]
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.dtype)?;
        if let Some(op) = self.op {
            write!(f, " {op:?}")?;
        }
        if let Some(root) = self.root {
            write!(f, " root {root}")?;
        }
        match self.layout {
            Some(_) => write!(f, " with a layout"),
            None => write!(f, " count {}", self.count),
        }
    }
}

/// The verdict on call `call` from every rank's deposit (in rank order; all present).
pub(super) fn verdict(call: u64, deposits: &[Option<Deposit>]) -> Result<(), Error> {
    let refusal = deposits.iter().enumerate().find_map(|(r, d)| match d {
        Some(Deposit::Refused(reason)) => Some((r, reason.clone())),
        _ => None,
    });
    if let Some((rank, reason)) = refusal {
        return Err(Error::PeerRefused { call, rank, reason });
    }
    let sigs: Vec<&Signature> = deposits
        .iter()
        .flatten()
        .filter_map(|d| match d {
            Deposit::Call(sig) => Some(sig),
            Deposit::Refused(_) => None,
        })
        .collect();
    // The common case compares without formatting anything.
    if !sigs.windows(2).all(|w| w[0].same_call(w[1])) {
        return Err(first_difference(call, &sigs));
    }
    if let Some(detail) = layouts_differ(&sigs) {
        return Err(Error::Mismatch {
            call,
            field: "layout",
            detail,
        });
    }
    asymmetric_scratch(call, &sigs)
}

/// The first rank that touches a peer's scratch while the two requested different sizes
/// (see [`ScratchUse`]): a fault of the executor, not of the callers.
///
/// One comparison per rank when every rank requested the same size (the common case);
/// otherwise one lookup per (rank, peer) pair the programs name.
fn asymmetric_scratch(call: u64, sigs: &[&Signature]) -> Result<(), Error> {
    let first = sigs.first().map(|s| s.scratch.bytes);
    if sigs.iter().all(|s| Some(s.scratch.bytes) == first) {
        return Ok(());
    }
    let by_rank: HashMap<Rank, usize> = sigs.iter().map(|s| (s.rank, s.scratch.bytes)).collect();
    let bytes = |rank: Rank| by_rank.get(&rank).copied();
    for sig in sigs {
        for &peer in sig.scratch.peers.iter() {
            match bytes(peer) {
                Some(theirs) if theirs != sig.scratch.bytes => {
                    return Err(Error::AsymmetricScratch {
                        call,
                        executor: sig.executor.unwrap_or("none"),
                        rank: sig.rank,
                        bytes: sig.scratch.bytes,
                        peer,
                        peer_bytes: theirs,
                    })
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The mismatch of signatures that are not all [`Signature::same_call`]: the first
/// differing field in [`Signature::fields`] order, else the executor.
fn first_difference(call: u64, sigs: &[&Signature]) -> Error {
    let fields: Vec<_> = sigs.iter().map(|s| s.fields()).collect();
    let differing = (0..fields[0].len()).find_map(|i| {
        let values: Vec<(Rank, String)> = sigs
            .iter()
            .zip(&fields)
            .map(|(s, f)| (s.rank, f[i].1.clone()))
            .collect();
        let differs = values.iter().any(|(_, v)| *v != values[0].1);
        differs.then(|| (fields[0][i].0, values))
    });
    let (field, values) = differing.unwrap_or_else(|| {
        let executors = sigs
            .iter()
            .map(|s| (s.rank, s.executor.unwrap_or("none").to_string()))
            .collect();
        ("executor", executors)
    });
    Error::Mismatch {
        call,
        field,
        detail: by_value(&values),
    }
}

/// `ranks {0,1} pass X; rank 2 passes Y`.
fn by_value(values: &[(Rank, String)]) -> String {
    let mut groups: Vec<(String, Vec<Rank>)> = Vec::new();
    for (rank, value) in values {
        match groups.iter_mut().find(|(v, _)| v == value) {
            Some((_, ranks)) => ranks.push(*rank),
            None => groups.push((value.clone(), vec![*rank])),
        }
    }
    let shown: Vec<String> = groups
        .iter()
        .map(|(value, ranks)| match ranks.as_slice() {
            [one] => format!("rank {one} passes {value}"),
            many => format!("ranks {many:?} pass {value}"),
        })
        .collect();
    shown.join("; ")
}

/// Why the layouts of a vector call disagree, if they do.
fn layouts_differ(sigs: &[&Signature]) -> Option<String> {
    let first = sigs.first()?;
    match first.layout.as_deref()? {
        VLayout::Blocks { displs, .. } => {
            // The common case compares the slices; only a mismatch is formatted.
            let same = sigs.iter().all(|s| {
                matches!(s.layout.as_deref(), Some(VLayout::Blocks { displs: d, .. }) if d == displs)
            });
            if same {
                return None;
            }
            let values: Vec<(Rank, String)> = sigs
                .iter()
                .map(|s| match s.layout.as_deref() {
                    Some(VLayout::Blocks { displs, .. }) => {
                        (s.rank, format!("displacements {displs:?}"))
                    }
                    _ => (s.rank, "no block layout".into()),
                })
                .collect();
            Some(by_value(&values))
        }
        VLayout::P2p { .. } => pairs_differ(sigs),
    }
}

/// One non-empty item of an ordered pair's stream: `(sender, receiver, count)`.
type PairItem = (Rank, Rank, usize);

/// The first ordered pair whose sends and receives disagree: the non-empty sends of `a`
/// to `b`, in call order, against the non-empty receives of `b` from `a`.
///
/// Every call of these operators runs it, so it allocates two lists and sorts them, and
/// hashes nothing: each list sorted stably by pair keeps a pair's counts in call order,
/// and the two are equal exactly when every pair agrees. Only a mismatch is looked at
/// pair by pair.
fn pairs_differ(sigs: &[&Signature]) -> Option<String> {
    let mut layouts = Vec::with_capacity(sigs.len());
    let (mut send_items, mut recv_items) = (0usize, 0usize);
    for sig in sigs {
        let Some((sends, recvs)) = sig.layout.as_deref().and_then(VLayout::p2p) else {
            return Some(format!("rank {} passes no point-to-point layout", sig.rank));
        };
        send_items = send_items.saturating_add(sends.len());
        recv_items = recv_items.saturating_add(recvs.len());
        layouts.push((sig.rank, sends, recvs));
    }
    // Sized once: grown item by item, reallocating them took half of the comparison's
    // time (perf, a 1 KiB AlltoAllV on 8 ranks).
    let mut sent: Vec<PairItem> = Vec::with_capacity(send_items);
    let mut received: Vec<PairItem> = Vec::with_capacity(recv_items);
    for (rank, sends, recvs) in layouts {
        sent.extend(non_empty(sends).map(|i| (rank, i.peer, i.count)));
        received.extend(non_empty(recvs).map(|i| (i.peer, rank, i.count)));
    }
    sort_by_pair(&mut sent);
    sort_by_pair(&mut received);
    match sent == received {
        true => None,
        false => first_differing_pair(&sent, &received),
    }
}

/// Sort `items` stably by pair. Lists that are sorted already (an AlltoAllV's sends, one
/// per peer in rank order, deposited in rank order) are only looked at.
fn sort_by_pair(items: &mut [PairItem]) {
    if !items.is_sorted_by_key(|&(a, b, _)| (a, b)) {
        items.sort_by_key(|&(a, b, _)| (a, b));
    }
}

/// The non-empty items of `items`, in call order.
fn non_empty(items: &[P2pItem]) -> impl Iterator<Item = P2pItem> + '_ {
    items.iter().filter(|i| i.count > 0).copied()
}

/// The first pair, in (sender, receiver) order, whose counts differ between `sent` and
/// `received` (each sorted stably by pair), described. Up to the first item where the
/// lists part, every pair agrees; the lesser of the two pairs there is the first that
/// does not (one list has an item of it that the other lacks, or a different count).
fn first_differing_pair(sent: &[PairItem], received: &[PairItem]) -> Option<String> {
    let at = sent
        .iter()
        .zip(received)
        .take_while(|(s, r)| s == r)
        .count();
    let pair_at = |items: &[PairItem]| items.get(at).map(|&(a, b, _)| (a, b));
    let (a, b) = match (pair_at(sent), pair_at(received)) {
        (Some(s), Some(r)) => s.min(r),
        (s, r) => s.or(r)?,
    };
    let show = |items: &[PairItem]| {
        let counts: Vec<usize> = items
            .iter()
            .filter(|&&(x, y, _)| (x, y) == (a, b))
            .map(|&(_, _, count)| count)
            .collect();
        match counts.is_empty() {
            true => "nothing".to_string(),
            false => format!("counts {counts:?}"),
        }
    };
    Some(format!(
        "rank {a} sends {} to rank {b}, which receives {} from rank {a}",
        show(sent),
        show(received)
    ))
}
