//! The root: one thread in the process that created the job's id, which gathers every
//! rank's [`RankInfo`] and hands each the whole table (NCCL's `bootstrapRoot`).
//!
//! It accepts connections until every rank has joined or its deadline passed. Each
//! connection must open with the preamble ([`wire`]): a wrong magic or secret is logged
//! and dropped before a byte more is read. A rank outside the job, a second claim on a
//! rank, or a rank started with another rank count is refused alone (its connection gets
//! the refusal; the job goes on waiting for the real rank). When every rank is in, the
//! root compares their selection digests part by part; any difference refuses every rank,
//! naming the part and which ranks hold which value. At the deadline, the ranks that
//! joined are told which ranks never came. Then the thread ends: a root serves one job.

use super::error::BootstrapError;
use super::id::UniqueId;
use super::wire::{self, Answer, Hello, MAX_HELLO, PREAMBLE};
use super::{JobTable, RankInfo, Refusal};
use crate::limits::MAX_RANKS;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a connection may take to present its preamble and hello: a rank sends them
/// at once; a silent connection must not hold the root up for long.
const HELLO_WITHIN: Duration = Duration::from_secs(5);

/// How often the root looks for a new connection while none is pending.
const ACCEPT_POLL: Duration = Duration::from_millis(2);

/// Start the root thread for `id` on `listener`; it gives up after `timeout`.
pub(crate) fn spawn(
    listener: TcpListener,
    id: UniqueId,
    timeout: Duration,
) -> Result<(), BootstrapError> {
    listener
        .set_nonblocking(true)
        .map_err(|e| BootstrapError::io(id.root, "configuring the root's listener", e))?;
    let handle = std::thread::Builder::new()
        .name("oxccl-bootstrap-root".into())
        .spawn(move || Root::new(id).serve(&listener, Instant::now() + timeout))
        .map_err(|e| BootstrapError::io(id.root, "starting the root's thread", e))?;
    RUNNING.lock().push((id.root, handle));
    Ok(())
}

/// The roots this process runs, by address: a rank in the same process must not return
/// (and perhaps exit) before its root has answered every rank.
static RUNNING: parking_lot::Mutex<Vec<(SocketAddr, JoinHandle<()>)>> =
    parking_lot::Mutex::new(Vec::new());

/// Wait until this process's root at `root`, if it runs one, has answered every rank (or
/// given up at its deadline).
pub(crate) fn wait_local(root: SocketAddr) {
    let handle = {
        let mut running = RUNNING.lock();
        let at = running.iter().position(|(addr, _)| *addr == root);
        at.map(|i| running.swap_remove(i).1)
    };
    if let Some(handle) = handle {
        let _ = handle.join();
    }
}

/// The root's state while ranks join.
struct Root {
    id: UniqueId,
    /// The job's rank count, once known (from the id, or from the first rank).
    ranks: Option<usize>,
    /// Joined ranks: their connection and what they told.
    joined: Vec<Option<(TcpStream, RankInfo)>>,
}

impl Root {
    fn new(id: UniqueId) -> Root {
        Root {
            id,
            ranks: (id.ranks > 0).then_some(id.ranks),
            joined: Vec::new(),
        }
    }

    fn complete(&self) -> bool {
        self.ranks
            .is_some_and(|n| self.joined.len() == n && self.joined.iter().all(Option::is_some))
    }

    fn serve(mut self, listener: &TcpListener, deadline: Instant) {
        while !self.complete() {
            match listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer.to_string()),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return self.give_up();
                    }
                    std::thread::sleep(ACCEPT_POLL);
                }
                Err(e) => tracing::warn!(error = %e, "bootstrap root: accept failed"),
            }
        }
        self.answer_all();
    }

    /// Read a connection's preamble and hello; keep it, refuse it, or drop it.
    fn admit(&mut self, mut stream: TcpStream, peer: String) {
        let setup = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_read_timeout(Some(HELLO_WITHIN)))
            .and_then(|()| stream.set_nodelay(true));
        if let Err(e) = setup {
            tracing::warn!(%peer, error = %e, "bootstrap root: cannot configure a connection");
            return;
        }
        let mut preamble = [0u8; PREAMBLE];
        if let Err(e) = stream.read_exact(&mut preamble) {
            tracing::warn!(%peer, error = %e, "bootstrap root: dropped a connection without a preamble");
            return;
        }
        let (magic, secret) = wire::parse_preamble(&preamble);
        if !magic || !self.id.secret.matches(secret) {
            tracing::warn!(
                %peer,
                "bootstrap root: dropped a connection that did not present the job's secret"
            );
            return;
        }
        let hello: Hello = match wire::read_frame(&mut stream, MAX_HELLO, &peer) {
            Ok(hello) => hello,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "bootstrap root: dropped a bad hello");
                return;
            }
        };
        match self.check(&hello) {
            Ok(()) => {
                let rank = hello.info.rank;
                self.joined[rank] = Some((stream, hello.info));
            }
            Err(refusal) => {
                tracing::warn!(%peer, %refusal, "bootstrap root: refused a rank");
                let _ = wire::send_frame(&mut stream, &Answer::Refused(refusal), &peer);
            }
        }
    }

    /// Whether `hello` may take its rank.
    fn check(&mut self, hello: &Hello) -> Result<(), Refusal> {
        let rank = hello.info.rank;
        // Checked before it sizes anything: a claim of 10^12 ranks must not allocate.
        if !(1..=MAX_RANKS).contains(&hello.ranks) {
            return Err(Refusal::RankCountOutOfRange {
                rank,
                claimed: hello.ranks,
                max: MAX_RANKS,
            });
        }
        let ranks = *self.ranks.get_or_insert(hello.ranks);
        if hello.ranks != ranks {
            return Err(Refusal::RankCount {
                rank,
                claimed: hello.ranks,
                expected: ranks,
            });
        }
        if rank >= ranks {
            return Err(Refusal::OutOfRange { rank, ranks });
        }
        self.joined.resize_with(ranks, || None);
        if self.joined[rank].is_some() {
            return Err(Refusal::Duplicate { rank });
        }
        Ok(())
    }

    /// Every rank is in: the table, or every digest that differs.
    fn answer_all(self) {
        let (streams, infos): (Vec<TcpStream>, Vec<RankInfo>) =
            self.joined.into_iter().flatten().unzip();
        let answer = match super::digest_mismatches(&infos) {
            mismatches if mismatches.is_empty() => Answer::Table(JobTable { ranks: infos }),
            mismatches => Answer::Refused(Refusal::Digests { mismatches }),
        };
        send_to_all(streams, &answer);
    }

    /// The deadline passed: tell those who came which ranks did not.
    fn give_up(self) {
        let missing: Vec<usize> = match self.ranks {
            Some(n) => (0..n)
                .filter(|&r| self.joined.get(r).is_none_or(Option::is_none))
                .collect(),
            None => Vec::new(),
        };
        tracing::warn!(?missing, "bootstrap root: gave up waiting for ranks");
        let answer = Answer::Refused(Refusal::Missing {
            ranks: missing,
            expected: self.ranks.unwrap_or(0),
        });
        send_to_all(self.joined.into_iter().flatten().map(|(s, _)| s), &answer);
    }
}

fn send_to_all(streams: impl IntoIterator<Item = TcpStream>, answer: &Answer) {
    for mut stream in streams {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "a rank".to_string(), |a| a.to_string());
        // A rank that stopped reading must not hold the answers of the others.
        let _ = stream.set_write_timeout(Some(HELLO_WITHIN));
        if let Err(e) = wire::send_frame(&mut stream, answer, &peer) {
            tracing::warn!(%peer, error = %e, "bootstrap root: could not answer a rank");
        }
    }
}
