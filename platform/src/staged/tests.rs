//! The staged device on hand-written programs. There is no accelerator here, so the
//! "device memory" is host memory reached by address ([`HostAddressed`]), through a
//! [`StageCopies`] that counts and can refuse its copies: what is tested is what staging adds (what is copied
//! in and back, and when), not a driver.

use super::{writes_whole_output, HostAddressed, StageCopies, StagedDevice};
use crate::device::{
    wait_out, CompileRequest, Device, DeviceConfig, DeviceSpan, Submission, UserBuffers,
};
use crate::error::{AbortCause, ConfigFault, DeviceError};
use crate::ir::{Buf, Rank, RankProgram, Slice};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// Copies between host "device memory" (spans over test-owned vectors) and staging,
/// logged as `(rank, to_host, bytes)`; copies to the host of `refuse` fail.
#[derive(Default)]
struct HostSpans {
    log: Arc<Mutex<Vec<(Rank, bool, usize)>>>,
    refuse: Option<Rank>,
}

impl StageCopies for HostSpans {
    fn to_host(&self, rank: Rank, src: DeviceSpan, dst: &mut [u8]) -> Result<(), DeviceError> {
        if self.refuse == Some(rank) {
            return Err(ConfigFault::DeviceMemory { kind: "test" }.into());
        }
        assert_eq!(src.len, dst.len());
        self.log.lock().push((rank, true, dst.len()));
        // SAFETY: every span of these tests covers a live test vector (see `span`).
        unsafe { HostAddressed::new() }.to_host(rank, src, dst)
    }

    fn to_device(&self, rank: Rank, src: &[u8], dst: DeviceSpan) -> Result<(), DeviceError> {
        assert_eq!(src.len(), dst.len);
        self.log.lock().push((rank, false, src.len()));
        // SAFETY: as above.
        unsafe { HostAddressed::new() }.to_device(rank, src, dst)
    }
}

/// A test vector as "device memory". The vector must outlive every call bound to it.
fn span(v: &mut [u8]) -> DeviceSpan {
    DeviceSpan {
        addr: v.as_mut_ptr() as u64,
        len: v.len(),
    }
}

fn out_of_place(input: &mut [u8], output: &mut [u8]) -> UserBuffers<'static> {
    UserBuffers::Device {
        input: span(input),
        output: span(output),
        in_place: false,
    }
}

fn device(copies: HostSpans, timeout_ms: u64) -> StagedDevice {
    let config = DeviceConfig {
        ccl_bytes: 1 << 16,
        link_channels: 1,
        exec_timeout: Duration::from_millis(timeout_ms),
        host_threads: 2,
        ..DeviceConfig::all_local(2)
    };
    StagedDevice::new("test", config, Box::new(copies)).unwrap()
}

fn submission<'a>(
    dev: &StagedDevice,
    program: RankProgram,
    user: UserBuffers<'a>,
) -> Result<Submission<'a>, DeviceError> {
    fenced(dev, program, user, Vec::new())
}

/// A submission whose `peers` touch its buffers (zero-copy): fenced on them at its exit.
fn fenced<'a>(
    dev: &StagedDevice,
    program: RankProgram,
    user: UserBuffers<'a>,
    peers: Vec<Rank>,
) -> Result<Submission<'a>, DeviceError> {
    let compiled = dev.compile(CompileRequest {
        program: Arc::new(program),
        scratch: None,
        exit_fence: !peers.is_empty(),
        peers,
        local_notifies: 1,
        in_place: user.is_in_place(),
        footprint: 0,
    })?;
    Ok(Submission {
        compiled,
        user,
        epoch: 1,
        gate: None,
    })
}

/// Rank 0 hands its input's first `len` bytes to rank 1's Output at `at` (the host
/// tests' program).
fn hand_off(dev: &StagedDevice, len: usize, at: usize) -> (RankProgram, RankProgram) {
    crate::host::tests::hand_off(dev.config().layout(), len, at)
}

#[test]
fn device_buffers_are_copied_in_run_on_the_host_and_copied_back() {
    for through_submit in [false, true] {
        let copies = HostSpans::default();
        let log = copies.log.clone();
        let dev = device(copies, 10_000);
        let (p0, p1) = hand_off(&dev, 64, 0);
        let mut in0: Vec<u8> = (0..64).collect();
        let mut out0 = vec![0xAA; 64];
        let (mut in1, mut out1) = (vec![7; 64], vec![0; 64]);
        let group = vec![
            submission(&dev, p0, out_of_place(&mut in0, &mut out0)).unwrap(),
            submission(&dev, p1, out_of_place(&mut in1, &mut out1)).unwrap(),
        ];
        let results: Vec<_> = match through_submit {
            false => dev.run(group),
            // SAFETY: every completion is waited out before the buffers are read.
            true => unsafe { dev.submit(group) }
                .into_iter()
                .map(|c| wait_out(&mut *c?, Duration::from_secs(10)))
                .collect(),
        };
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert_eq!(out1, in0, "rank 1's device output holds rank 0's input");
        assert_eq!(
            out0,
            vec![0xAA; 64],
            "rank 0's output is reached by nothing"
        );
        // Rank 0's input in, rank 1's output back: rank 1's program writes all of its
        // output, so it is not copied in first; nothing reaches rank 0's output.
        let mut copied = log.lock().clone();
        copied.sort_unstable();
        assert_eq!(
            copied,
            vec![(0, true, 64), (1, false, 64)],
            "{through_submit}"
        );
    }
}

#[test]
fn bytes_of_the_output_the_program_leaves_alone_come_back_as_they_were() {
    let copies = HostSpans::default();
    let log = copies.log.clone();
    let dev = device(copies, 10_000);
    // Rank 1 writes bytes 8..40 of a 48-byte output it reaches to 40.
    let (p0, p1) = hand_off(&dev, 32, 8);
    let mut in0: Vec<u8> = (100..132).collect();
    let mut out0 = vec![0; 32];
    let (mut in1, mut out1) = (vec![0; 48], vec![9u8; 48]);
    let results = dev.run(vec![
        submission(&dev, p0, out_of_place(&mut in0, &mut out0)).unwrap(),
        submission(&dev, p1, out_of_place(&mut in1, &mut out1)).unwrap(),
    ]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(&out1[..8], &[9; 8], "before the written bytes");
    assert_eq!(&out1[8..40], &in0[..], "the written bytes");
    assert_eq!(&out1[40..], &[9; 8], "past the program's reach");
    assert!(
        log.lock().contains(&(1, true, 40)),
        "the reach was copied in"
    );
}

#[test]
fn an_in_place_buffer_is_copied_in_and_back_whole() {
    let dev = device(HostSpans::default(), 10_000);
    // Rank 1 reduces its buffer's first half into its second half, in place.
    let mut p = RankProgram::new(1, 1);
    p.streams[0].reduce(
        vec![
            Slice::new(1, Buf::Input, 0, 16),
            Slice::new(1, Buf::Output, 16, 16),
        ],
        Slice::new(1, Buf::Output, 16, 16),
        crate::dtype::DataType::U32,
        crate::dtype::ReduceOp::Sum,
    );
    let mut buf: Vec<u8> = [1u32, 2, 3, 4, 10, 20, 30, 40]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    let user = UserBuffers::Device {
        input: span(&mut buf),
        output: span(&mut buf),
        in_place: true,
    };
    let s = submission(&dev, p, user).unwrap();
    let results = dev.run(vec![s]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let words: Vec<u32> = buf
        .chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, vec![1, 2, 3, 4, 11, 22, 33, 44]);
}

#[test]
fn what_a_peer_writes_into_a_rank_s_buffer_comes_back_whole() {
    let dev = device(HostSpans::default(), 10_000);
    // Zero-copy: rank 0 writes its input into rank 1's output, which rank 1's own
    // program never reaches; rank 1 only waits for the post.
    let notify = dev.config().layout().local(1, 0);
    let mut p0 = RankProgram::new(0, 1);
    p0.streams[0].copy(
        Slice::new(0, Buf::Input, 0, 32),
        Slice::new(1, Buf::Output, 16, 32),
    );
    p0.streams[0].post(notify);
    let mut p1 = RankProgram::new(1, 1);
    p1.streams[0].wait(notify);
    let mut in0: Vec<u8> = (1..=32).collect();
    let mut out0 = vec![0u8; 8];
    let (mut in1, mut out1) = (vec![0u8; 8], vec![5u8; 64]);
    let results = dev.run(vec![
        fenced(&dev, p0, out_of_place(&mut in0, &mut out0), vec![1]).unwrap(),
        fenced(&dev, p1, out_of_place(&mut in1, &mut out1), vec![0]).unwrap(),
    ]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(&out1[16..48], &in0[..], "the peer's write");
    assert_eq!((&out1[..16], &out1[48..]), (&[5; 16][..], &[5; 16][..]));
}

#[test]
fn a_call_that_fails_copies_nothing_back() {
    let dev = device(HostSpans::default(), 300);
    // Rank 1 writes its output, then waits for a post nobody makes.
    let notify = dev.config().layout().local(1, 0);
    let mut p = RankProgram::new(1, 1);
    p.streams[0].copy(
        Slice::new(1, Buf::Input, 0, 16),
        Slice::new(1, Buf::Output, 0, 16),
    );
    p.streams[0].wait(notify);
    let (mut input, mut output) = (vec![5u8; 16], vec![0u8; 16]);
    let s = submission(&dev, p, out_of_place(&mut input, &mut output)).unwrap();
    let err = dev.run(vec![s]).pop().unwrap().unwrap_err();
    assert!(err.to_string().contains("Wait"), "{err}");
    assert_eq!(
        output,
        vec![0; 16],
        "the staged write never reached the device"
    );
}

#[test]
fn a_copy_that_fails_stops_the_device_and_releases_the_peer() {
    let copies = HostSpans {
        refuse: Some(0),
        ..HostSpans::default()
    };
    let dev = device(copies, 60_000);
    let (p0, p1) = hand_off(&dev, 16, 0);
    let (mut in0, mut out0) = (vec![1u8; 16], vec![0u8; 16]);
    let (mut in1, mut out1) = (vec![0u8; 16], vec![0u8; 16]);
    let results = dev.run(vec![
        submission(&dev, p0, out_of_place(&mut in0, &mut out0)).unwrap(),
        submission(&dev, p1, out_of_place(&mut in1, &mut out1)).unwrap(),
    ]);
    assert!(
        matches!(
            &results[0],
            Err(DeviceError::Config(ConfigFault::DeviceMemory { .. }))
        ),
        "{results:?}"
    );
    // Rank 1 would wait for rank 0's post until the 60 s timeout: it is released, told
    // that rank 0 failed.
    match &results[1] {
        Err(DeviceError::Aborted {
            cause: AbortCause::PeerFailed { rank: 0, .. },
            ..
        }) => {}
        other => panic!("rank 1 should be aborted for rank 0: {other:?}"),
    }
    assert!(dev.stopped().is_some());
}

#[test]
fn a_device_buffer_shorter_than_the_program_reaches_is_refused_before_any_copy() {
    let copies = HostSpans::default();
    let log = copies.log.clone();
    let dev = device(copies, 10_000);
    let (p0, _) = hand_off(&dev, 64, 0);
    let (mut input, mut output) = (vec![0u8; 63], vec![0u8; 64]);
    let s = submission(&dev, p0, out_of_place(&mut input, &mut output)).unwrap();
    let err = dev.run(vec![s]).pop().unwrap().unwrap_err();
    assert!(matches!(err, DeviceError::Config(_)), "{err:?}");
    assert!(
        log.lock().is_empty(),
        "nothing was copied: {:?}",
        log.lock()
    );
}

#[test]
fn sequences_are_not_queued_and_foreign_programs_and_shared_memory_are_refused() {
    let dev = device(HostSpans::default(), 10_000);
    let caps = dev.capabilities();
    assert!(!caps.queued_submissions && !caps.whole_sequences && caps.executes);
    let other = device(HostSpans::default(), 10_000);
    let (p0, _) = hand_off(&other, 8, 0);
    let (mut input, mut output) = (vec![0u8; 8], vec![0u8; 8]);
    let foreign = submission(&other, p0, out_of_place(&mut input, &mut output)).unwrap();
    let err = dev.run(vec![foreign]).pop().unwrap().unwrap_err();
    assert!(
        matches!(err, DeviceError::Config(ConfigFault::ForeignProgram)),
        "{err:?}"
    );
    let err = dev.alloc_shared(0, 64).unwrap_err();
    assert!(err.to_string().contains("test"), "{err}");
}

#[test]
fn host_slices_run_as_on_the_host() {
    let copies = HostSpans::default();
    let log = copies.log.clone();
    let dev = device(copies, 10_000);
    let (p0, p1) = hand_off(&dev, 8, 0);
    let (in0, mut out0) = ([3u8; 8], [0u8; 8]);
    let (in1, mut out1) = ([0u8; 8], [0u8; 8]);
    let results = dev.run(vec![
        submission(
            &dev,
            p0,
            UserBuffers::OutOfPlace {
                input: &in0,
                output: &mut out0,
            },
        )
        .unwrap(),
        submission(
            &dev,
            p1,
            UserBuffers::OutOfPlace {
                input: &in1,
                output: &mut out1,
            },
        )
        .unwrap(),
    ]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(out1, in0);
    assert!(log.lock().is_empty());
}

#[test]
fn whole_output_coverage_counts_only_the_rank_s_own_output_writes() {
    let writes = |slices: &[(Rank, Buf, usize, usize)]| {
        let mut p = RankProgram::new(1, 1);
        for &(rank, buf, offset, len) in slices {
            p.streams[0].copy(
                Slice::new(1, Buf::CclIn, 0, len),
                Slice::new(rank, buf, offset, len),
            );
        }
        p
    };
    let out = Buf::Output;
    assert!(writes_whole_output(&writes(&[(1, out, 0, 10)]), 10));
    assert!(writes_whole_output(
        &writes(&[(1, out, 4, 6), (1, out, 0, 5)]),
        10
    ));
    assert!(!writes_whole_output(
        &writes(&[(1, out, 0, 4), (1, out, 5, 5)]),
        10
    ));
    assert!(
        !writes_whole_output(&writes(&[(0, out, 0, 10)]), 10),
        "a peer's"
    );
    assert!(!writes_whole_output(
        &writes(&[(1, Buf::CclOut, 0, 10)]),
        10
    ));
    assert!(writes_whole_output(&writes(&[]), 0));
}

#[test]
fn host_addressed_user_memory_lends_zeroed_blocks_copies_and_has_one_stream() {
    use crate::user_memory::UserMemory;
    // SAFETY: only the blocks it lends are used below.
    let memory = unsafe { HostAddressed::new() };
    let a = memory.alloc(0, 13).unwrap();
    let b = memory.alloc(0, 13).unwrap();
    assert_eq!(a.span().len, 13);
    assert_eq!(a.span().addr % 8, 0, "aligned for every data type");
    // SAFETY: the block's 13 bytes, unused elsewhere.
    let bytes = |span: DeviceSpan| unsafe {
        std::slice::from_raw_parts_mut(span.addr as usize as *mut u8, span.len)
    };
    assert!(bytes(a.span()).iter().all(|&x| x == 0));
    bytes(a.span()).copy_from_slice(b"thirteen byte");
    // SAFETY: both blocks are live and ours.
    unsafe { memory.copy(0, a.span(), b.span()) }.unwrap();
    assert_eq!(bytes(b.span()), b"thirteen byte");
    let short = DeviceSpan {
        len: 12,
        ..b.span()
    };
    // SAFETY: as above (refused before any byte moves).
    let err = unsafe { memory.copy(0, a.span(), short) }.unwrap_err();
    assert!(matches!(
        err,
        DeviceError::Config(ConfigFault::CopyLengths {
            source_len: 13,
            destination_len: 12
        })
    ));
    assert!(memory.sync_stream(0, 0).is_ok());
    let err = memory.sync_stream(0, 0x77).unwrap_err();
    assert!(err.to_string().contains("0x77"), "{err}");
    assert!(memory.check_span(0, "sendbuff", a.span()).is_ok());
}
