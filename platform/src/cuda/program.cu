// The program kernel: every local rank's program of one call on one GPU, run by one
// cooperative launch (see program.rs for the encoding, launch.rs for the launch).
//
// Block b runs entry b / K (one stream of one rank) as slice b % K of its K blocks: a
// data task is split over the K blocks element by element, a Post or a Wait is done by
// the first of them between barriers of the K. The signal words are the IR's binary
// notifies: a Post sets its word to 1, a Wait spins until it is set and clears it. Every
// spin also watches the device's abort word, so a stopped device releases every block.
//
// Included after the generated prelude, which defines THREADS, MAX_OPERANDS, the reduce
// ops Op_* and `reduce_dispatch` (a switch over the 48 (type, op) pairs).

typedef unsigned long long u64;
typedef unsigned int u32;

// Task kinds and header fields; the Rust side (program.rs) writes the same.
#define KIND_END 0
#define KIND_COPY 1
#define KIND_REDUCE 2
#define KIND_POST 3
#define KIND_WAIT 4
#define HEAD_KIND(h) ((u32)((h) & 0xff))
#define HEAD_PAIR(h) ((u32)(((h) >> 8) & 0xff))
#define HEAD_NSRC(h) ((u32)(((h) >> 16) & 0xffff))
#define HEAD_NDST(h) ((u32)(((h) >> 32) & 0xff))
#define HEAD_SYNC(h) (((h) >> 40) & 1)
#define HEAD_TASK(h) ((u32)((h) >> 42))
// An operand in a user buffer: bit 63 set, bit 62 for Output, in bits 48-61 zero for the
// rank's own buffer or a peer's rank plus one (zero-copy), the offset below.
#define OWN_BIT (1ull << 63)
#define OUTPUT_BIT (1ull << 62)
#define PEER_SHIFT 48
#define PEER_MASK ((1ull << (62 - PEER_SHIFT)) - 1)
#define OFFSET_MASK ((1ull << PEER_SHIFT) - 1)
// Words of one entry of the descriptor.
#define ENTRY_WORDS 10
#define PROGRESS_DONE 0xffffffffu

struct Params {
  const u64* desc;    // ENTRY_WORDS per entry, then the fence lists
  u64 epoch;          // this call's epoch (32-bit words compare cyclically)
  const volatile u32* abort;  // nonzero: the device stopped
  const u64* users;   // (Input, Output) of every rank of the communicator
  u32 k;              // blocks per entry
};

// Spin until `done()` or the device stops; true when it stopped. Thread 0 only.
template <typename F>
__device__ __forceinline__ bool spin(F done, const volatile u32* abort) {
  u32 n = 0;
  while (!done()) {
    if ((++n & 255) == 0 && *abort != 0) return true;
  }
  return false;
}

__device__ __forceinline__ u32 vload(const u64 addr) { return *(const volatile u32*)addr; }
__device__ __forceinline__ void vstore(const u64 addr, u32 v) { *(volatile u32*)addr = v; }

// Every block of a group of `blocks` arrives; true when the device stopped. `passed` is
// how many barriers of this counter the block went through (thread 0's count).
__device__ __forceinline__ bool barrier(u64 counter, u32 blocks, u32* passed,
                                        const volatile u32* abort, volatile int* stopped) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (blocks > 1) {
      *passed += 1;
      const u32 target = *passed * blocks;
      atomicAdd((u32*)counter, 1u);
      if (spin([&] { return vload(counter) >= target; }, abort)) *stopped = 1;
      __threadfence();
    }
  }
  __syncthreads();
  return *stopped != 0;
}

// `word` (a 32-bit epoch) has reached `value`, cyclically.
__device__ __forceinline__ bool reached(u64 word, u32 value) {
  return (int)(vload(word) - value) >= 0;
}

__device__ __forceinline__ u64 resolve(u64 a, u64 input, u64 output, const u64* users) {
  if ((a & OWN_BIT) == 0) return a;
  const u64 out = (a & OUTPUT_BIT) ? 1 : 0;
  const u64 peer = (a >> PEER_SHIFT) & PEER_MASK;
  const u64 base = peer == 0 ? (out ? output : input) : users[2 * (peer - 1) + out];
  return base + (a & OFFSET_MASK);
}

extern "C" __global__ void __launch_bounds__(THREADS) oxccl_program(Params p) {
  __shared__ u64 operands[MAX_OPERANDS];
  __shared__ int stopped;
  const u32 e = blockIdx.x / p.k;
  const u32 j = blockIdx.x % p.k;
  const u64* d = p.desc + (u64)e * ENTRY_WORDS;
  const u64* task = (const u64*)d[0];
  const u64 input = d[1], output = d[2], progress = d[3], fault = d[4];
  const u64 entry_counter = d[5], rank_counter = d[6];
  const u64 packed = d[7];
  const u32 stream = (u32)(packed & 0xffff);
  const u32 rank_blocks = (u32)((packed >> 16) & 0xffffffff);
  const bool leader = stream == 0 && j == 0;
  const u64* fences = p.desc + d[8];
  const u64 epoch_word = d[9];
  const u32 epoch = (u32)p.epoch;
  u32 entry_passed = 0, rank_passed = 0;
  if (threadIdx.x == 0) {
    // A stopped device runs nothing more: a CUDA graph's later steps still launch after
    // an abort released the earlier ones.
    stopped = *p.abort != 0 ? 1 : 0;
    // Entry fence: peers on other GPUs finished the previous call.
    if (leader) {
      const u64 n = fences[0];
      for (u64 i = 0; i < n && !stopped; ++i) {
        const u64 w = fences[1 + i];
        if (spin([&] { return reached(w, epoch - 1); }, p.abort)) stopped = 1;
      }
    }
  }
  if (barrier(rank_counter, rank_blocks, &rank_passed, p.abort, &stopped)) return;
  for (;;) {
    const u64 head = task[0];
    const u32 kind = HEAD_KIND(head);
    if (kind == KIND_END) break;
    if (kind == KIND_POST) {
      if (barrier(entry_counter, p.k, &entry_passed, p.abort, &stopped)) return;
      if (j == 0 && threadIdx.x == 0) {
        const u64 word = task[1];
        __threadfence_system();
        if (vload(word) != 0) vstore(fault, (stream << 24) | (HEAD_TASK(head) + 1));
        vstore(word, 1);
      }
      task += 2;
      continue;
    }
    if (kind == KIND_WAIT) {
      if (j == 0 && threadIdx.x == 0) {
        const u64 word = task[1];
        vstore(progress, HEAD_TASK(head) + 1);
        if (spin([&] { return vload(word) != 0; }, p.abort)) stopped = 1;
        vstore(word, 0);
        __threadfence();
      }
      if (barrier(entry_counter, p.k, &entry_passed, p.abort, &stopped)) return;
      task += 2;
      continue;
    }
    // Copy or Reduce.
    if (HEAD_SYNC(head)) {
      if (barrier(entry_counter, p.k, &entry_passed, p.abort, &stopped)) return;
    } else {
      __syncthreads();
    }
    const u64 count = task[1];
    const u32 nsrc = HEAD_NSRC(head), ndst = HEAD_NDST(head);
    for (u32 i = threadIdx.x; i < nsrc + ndst; i += blockDim.x)
      operands[i] = resolve(task[2 + i], input, output, p.users);
    __syncthreads();
    const u32 pair = kind == KIND_COPY ? COPY_PAIR : HEAD_PAIR(head);
    reduce_dispatch(pair, operands, nsrc, operands + nsrc, ndst, count, j, p.k);
    task += 2 + nsrc + ndst;
  }
  if (j == 0 && threadIdx.x == 0) vstore(progress, PROGRESS_DONE);
  if (barrier(rank_counter, rank_blocks, &rank_passed, p.abort, &stopped)) return;
  // The rank is done: its epoch word, then the exit fence on peers of other GPUs.
  if (leader && threadIdx.x == 0) {
    __threadfence_system();
    vstore(epoch_word, epoch);
    const u64 skip = 1 + fences[0];
    const u64 n = fences[skip];
    for (u64 i = 0; i < n; ++i) {
      const u64 w = fences[skip + 1 + i];
      if (spin([&] { return reached(w, epoch); }, p.abort)) break;
    }
  }
}
