//! Links: one rank's connection to one peer, with HCCL's handshake vocabulary.
//!
//! A [`Link`] is a value an executor asks the framework for; it appends tasks to a stream.
//! Its semantics, on the local end talking to `remote`:
//!
//! | helper | tasks | meaning |
//! |---|---|---|
//! | `tx_ack` | Post peer's Ack | "I am ready for this step" |
//! | `rx_ack` | Wait own Ack | "the peer is ready" |
//! | `tx_data_signal` | Post peer's DataSignal | "my data is in place / I am done with yours" |
//! | `rx_data_signal` | Wait own DataSignal | the peer's data is in place |
//! | `tx_async` | Copy into peer, Post peer's DataSignal | write and announce |
//! | `rx_async` | Wait own DataSignal | the peer's write landed |
//! | `tx_wait_done` | RDMA: Wait own DataAck | the peer confirmed my write (SDMA: nothing) |
//! | `rx_wait_done` | RDMA: Post peer's DataAck | confirm the peer's write (SDMA: nothing) |
//! | `barrier` | tx_ack, rx_ack, tx_data_signal, rx_data_signal | both ends reached it |
//! | `remote` | — | a [`Slice`] of the peer's buffer, for a local task that pulls from it |
//!
//! An SDMA-type link (DMA inside a server) completes a write before the next task of the
//! stream starts, so the DataSignal after it is enough. An RDMA-type link's write completes
//! asynchronously; the receiver answers with DataAck, which `tx_wait_done` awaits before the
//! sender may reuse its source or end the exchange.

use crate::ir::{Buf, Rank, Slice, StreamProgram};
use crate::notify::{LinkSignal, NotifyLayout};

/// The transport class of a link, which decides its handshake.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// Intra-server DMA-like link (HCCS, NVLink, shared memory): Ack + DataSignal.
    Sdma,
    /// Inter-server RDMA-like link (RoCE, InfiniBand): Ack + DataSignal + DataAck.
    Rdma,
}

/// What a link lets a rank do with its peer's memory.
///
/// A *load/store* link (threads of one process, shared memory, GPU peer access) exposes
/// the peer's buffers for reading and writing, so a task may pull from them. A *put-only*
/// link (TCP, RDMA write) only carries writes into the peer's registered device buffers
/// (CclIn, CclOut, Scratch) and signals: a task may not read a peer's buffer over it, and
/// may not write the peer's user buffers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkAccess {
    /// Put only: remote writes into CCL buffers and scratch, and signals.
    Put,
    /// Load and store: the peer's buffers are readable and writable.
    LoadStore,
}

impl LinkAccess {
    /// Short name, as topology files spell it.
    pub const fn name(self) -> &'static str {
        match self {
            LinkAccess::Put => "put",
            LinkAccess::LoadStore => "load-store",
        }
    }
}

/// The local end of a connection to one peer, on one notify channel.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub local: Rank,
    pub remote: Rank,
    pub kind: LinkKind,
    /// What this link lets the local end do with the peer's memory. Over a
    /// [`LinkAccess::Put`] link a task may only write the peer's CclIn, CclOut or Scratch
    /// and post its notifies; the analyzer and the planner refuse anything else.
    pub access: LinkAccess,
    pub channel: usize,
    layout: NotifyLayout,
}

impl Link {
    /// A load/store link from `local` to `remote` (see [`Link::with_access`] for a
    /// put-only one). The framework hands these out only for links that exist and are not
    /// broken, with the access the topology gives them.
    pub fn new(
        local: Rank,
        remote: Rank,
        kind: LinkKind,
        channel: usize,
        layout: NotifyLayout,
    ) -> Self {
        Link {
            local,
            remote,
            kind,
            access: LinkAccess::LoadStore,
            channel,
            layout,
        }
    }

    /// This link with the given access.
    pub fn with_access(self, access: LinkAccess) -> Self {
        Link { access, ..self }
    }

    /// True when the peer's buffers may be read (and its user buffers written) over this
    /// link.
    pub fn is_load_store(&self) -> bool {
        self.access == LinkAccess::LoadStore
    }

    fn local_signal(&self, s: LinkSignal) -> crate::ir::NotifyId {
        self.layout.link(self.local, self.remote, self.channel, s)
    }

    fn remote_signal(&self, s: LinkSignal) -> crate::ir::NotifyId {
        self.layout.link(self.remote, self.local, self.channel, s)
    }

    /// Tell the peer this end is ready.
    pub fn tx_ack(&self, stream: &mut StreamProgram) {
        stream.post(self.remote_signal(LinkSignal::Ack));
    }

    /// Wait until the peer said it is ready.
    pub fn rx_ack(&self, stream: &mut StreamProgram) {
        stream.wait(self.local_signal(LinkSignal::Ack));
    }

    /// Tell the peer the data is in place (or that this end is done with the peer's data).
    pub fn tx_data_signal(&self, stream: &mut StreamProgram) {
        stream.post(self.remote_signal(LinkSignal::DataSignal));
    }

    /// Wait for the peer's data signal.
    pub fn rx_data_signal(&self, stream: &mut StreamProgram) {
        stream.wait(self.local_signal(LinkSignal::DataSignal));
    }

    /// Write local slices into the peer's buffers, then signal the peer.
    /// Each pair is `(destination on the peer, local source)`.
    pub fn tx_async(&self, stream: &mut StreamProgram, writes: &[(Slice, Slice)]) {
        // A destination off the peer or a source off this rank is not refused here (never
        // a panic): the analyzer proves every byte's order, and the signal below orders
        // only the peer's.
        for &(dst, src) in writes {
            stream.copy(src, dst);
        }
        self.tx_data_signal(stream);
    }

    /// Wait until the peer's `tx_async` landed.
    pub fn rx_async(&self, stream: &mut StreamProgram) {
        self.rx_data_signal(stream);
    }

    /// Sender side, end of an exchange: on RDMA wait for the receiver's DataAck.
    pub fn tx_wait_done(&self, stream: &mut StreamProgram) {
        if self.kind == LinkKind::Rdma {
            stream.wait(self.local_signal(LinkSignal::DataAck));
        }
    }

    /// Receiver side, end of an exchange: on RDMA confirm the write with DataAck.
    pub fn rx_wait_done(&self, stream: &mut StreamProgram) {
        if self.kind == LinkKind::Rdma {
            stream.post(self.remote_signal(LinkSignal::DataAck));
        }
    }

    /// Both ends meet: Ack both ways, then DataSignal both ways.
    pub fn barrier(&self, stream: &mut StreamProgram) {
        self.tx_ack(stream);
        self.rx_ack(stream);
        self.tx_data_signal(stream);
        self.rx_data_signal(stream);
    }

    /// A slice of the peer's buffer. Over a put-only link only CclIn, CclOut and Scratch
    /// slices may be used, and only as write destinations.
    pub fn remote(&self, buf: Buf, offset: usize, len: usize) -> Slice {
        Slice::new(self.remote, buf, offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Task;

    fn pair(kind: LinkKind) -> (Link, Link) {
        let layout = NotifyLayout {
            ranks: 2,
            link_channels: 1,
        };
        (
            Link::new(0, 1, kind, 0, layout),
            Link::new(1, 0, kind, 0, layout),
        )
    }

    #[test]
    fn posts_of_one_end_are_waits_of_the_other() {
        let (a, b) = pair(LinkKind::Sdma);
        let (mut sa, mut sb) = (StreamProgram::default(), StreamProgram::default());
        a.tx_ack(&mut sa);
        b.rx_ack(&mut sb);
        a.tx_data_signal(&mut sa);
        b.rx_data_signal(&mut sb);
        for (post, wait) in sa.tasks.iter().zip(&sb.tasks) {
            match (post, wait) {
                (Task::Post { notify: p }, Task::Wait { notify: w }) => assert_eq!(p, w),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn rdma_adds_data_ack_and_sdma_does_not() {
        for (kind, tasks) in [(LinkKind::Sdma, 0), (LinkKind::Rdma, 1)] {
            let (a, b) = pair(kind);
            let (mut sa, mut sb) = (StreamProgram::default(), StreamProgram::default());
            a.tx_wait_done(&mut sa);
            b.rx_wait_done(&mut sb);
            assert_eq!(sa.tasks.len(), tasks);
            assert_eq!(sb.tasks.len(), tasks);
        }
    }
}
