//! Where each notify lives in a rank's notify table.
//!
//! A rank's notifies come in two regions. The **link region** is fixed for the lifetime of a
//! communicator: for every peer and every link channel, three notifies (Ack, DataSignal,
//! DataAck) that the peer posts and this rank waits on. Because it never changes, a notify
//! has one meaning in every operation; the device's epoch fence (see [`crate::device`])
//! keeps a peer's next operation from posting one before this rank consumed the last. The **local region** follows it: notifies that only this rank
//! posts and waits (stream fork/join, executor-private signals), numbered per program.

use crate::ir::{NotifyId, Rank};

/// The three notifies of one link end, in HCCL's vocabulary.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum LinkSignal {
    /// "I am ready": the peer may now write into (or read from) my buffers.
    Ack = 0,
    /// "The data is there": a write into my buffers has landed, or the peer is done.
    DataSignal = 1,
    /// RDMA-type links only: "your asynchronous write landed".
    DataAck = 2,
}

impl LinkSignal {
    /// Signals per link end.
    pub const COUNT: usize = 3;
}

const SIGNALS_PER_LINK: usize = LinkSignal::COUNT;

/// The shape of every rank's notify table in one communicator.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct NotifyLayout {
    /// Ranks in the communicator.
    pub ranks: usize,
    /// Independent notify sets per link (so two streams can use one link at once).
    pub link_channels: usize,
}

impl NotifyLayout {
    /// The notify that `owner` waits on for `signal` from `peer` on `channel`.
    pub fn link(&self, owner: Rank, peer: Rank, channel: usize, signal: LinkSignal) -> NotifyId {
        assert!(peer < self.ranks && channel < self.link_channels);
        let index = (peer * self.link_channels + channel) * SIGNALS_PER_LINK + signal as usize;
        NotifyId {
            rank: owner,
            index: index as u32,
        }
    }

    /// First index of the local region.
    pub fn local_base(&self) -> u32 {
        (self.ranks * self.link_channels * SIGNALS_PER_LINK) as u32
    }

    /// The `i`-th local notify of `owner`.
    pub fn local(&self, owner: Rank, i: usize) -> NotifyId {
        NotifyId {
            rank: owner,
            index: self.local_base() + i as u32,
        }
    }

    /// Notifies per rank needed for `local` local notifies.
    pub fn table_len(&self, local: usize) -> usize {
        self.local_base() as usize + local
    }

    /// The rank expected to post `id`: the peer of a link notify, the owner of a local
    /// one. `None` for an index past the link region's ranks (no notify of this layout).
    pub fn poster(&self, id: NotifyId) -> Option<Rank> {
        let index = id.index as usize;
        if index >= self.local_base() as usize {
            return Some(id.rank);
        }
        let peer = (index / SIGNALS_PER_LINK).checked_div(self.link_channels)?;
        (peer < self.ranks).then_some(peer)
    }

    /// A human description, for error messages: who is expected to post this notify.
    pub fn describe(&self, id: NotifyId) -> String {
        let index = id.index as usize;
        if index >= self.local_base() as usize {
            let i = index - self.local_base() as usize;
            return format!(
                "notify {} of rank {} (local #{i}: stream fork/join or executor-private)",
                id.index, id.rank
            );
        }
        let signal = match index % SIGNALS_PER_LINK {
            0 => "Ack",
            1 => "DataSignal",
            _ => "DataAck",
        };
        let link = index / SIGNALS_PER_LINK;
        let (peer, channel) = (link / self.link_channels, link % self.link_channels);
        format!(
            "notify {} of rank {} ({signal} from rank {peer}, link channel {channel})",
            id.index, id.rank
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_notifies_are_distinct_and_described() {
        let layout = NotifyLayout {
            ranks: 4,
            link_channels: 2,
        };
        let mut seen = std::collections::HashSet::new();
        for peer in 0..4 {
            for ch in 0..2 {
                for s in [LinkSignal::Ack, LinkSignal::DataSignal, LinkSignal::DataAck] {
                    let id = layout.link(1, peer, ch, s);
                    assert!(id.index < layout.local_base());
                    assert!(seen.insert(id));
                }
            }
        }
        let d = layout.describe(layout.link(1, 3, 1, LinkSignal::DataSignal));
        assert!(d.contains("DataSignal from rank 3, link channel 1"), "{d}");
        let d = layout.describe(layout.local(2, 5));
        assert!(d.contains("local #5"), "{d}");
    }
}
