/* Every collective, out of place and in place (NCCL's in-place pointers), with results
 * checked on every rank. */
#include "common.h"

/* A 16-bit float's value. */
static float from_f16(uint16_t h) {
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v = exp == 0 ? (float)mant / 1024.0f / 16384.0f
                     : (1.0f + (float)mant / 1024.0f) * (float)(1 << exp) / 32768.0f;
  return (h & 0x8000) ? -v : v;
}

/* A bfloat16's value. */
static float from_bf16(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

static const size_t type_size[oxcclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

/* Element i of buf as a double, whatever its type. */
static double element(const void* buf, int type, size_t i) {
  const char* p = (const char*)buf + i * type_size[type];
  switch (type) {
    case oxcclInt8: return *(const int8_t*)p;
    case oxcclUint8: return *(const uint8_t*)p;
    case oxcclInt32: return *(const int32_t*)p;
    case oxcclUint32: return *(const uint32_t*)p;
    case oxcclInt64: return (double)*(const int64_t*)p;
    case oxcclUint64: return (double)*(const uint64_t*)p;
    case oxcclFloat16: return from_f16(*(const uint16_t*)p);
    case oxcclFloat32: return *(const float*)p;
    case oxcclFloat64: return *(const double*)p;
    default: return from_bf16(*(const uint16_t*)p);
  }
}

/* Write 1 as element i of buf. */
static void set_one(void* buf, int type, size_t i) {
  char* p = (char*)buf + i * type_size[type];
  switch (type) {
    case oxcclInt8: case oxcclUint8: *(uint8_t*)p = 1; break;
    case oxcclInt32: case oxcclUint32: *(uint32_t*)p = 1; break;
    case oxcclInt64: case oxcclUint64: *(uint64_t*)p = 1; break;
    case oxcclFloat16: *(uint16_t*)p = 0x3c00; break;
    case oxcclFloat32: *(float*)p = 1.0f; break;
    case oxcclFloat64: *(double*)p = 1.0; break;
    default: *(uint16_t*)p = 0x3f80; break;
  }
}

/* Every NCCL data type by its number, and every reduce op on int32. */
static void test_all_reduce(oxcclComm_t comm) {
  for (int type = 0; type < oxcclNumTypes; type++) {
    void* send = xcalloc(C, 8);
    void* recv = xcalloc(C, 8);
    for (size_t i = 0; i < C; i++) set_one(send, type, i);
    OK(oxcclAllReduce(send, recv, C, (oxcclDataType_t)type, oxcclSum, comm, NULL));
    for (size_t i = 0; i < C; i++)
      CHECK(element(recv, type, i) == g_nranks, "type %d [%zu] = %g", type, i, element(recv, type, i));
    OK(oxcclAllReduce(send, send, C, (oxcclDataType_t)type, oxcclSum, comm, NULL));
    CHECK(element(send, type, C - 1) == g_nranks, "in place, type %d", type);
    free(send);
    free(recv);
  }
  int32_t x[C], y[C];
  const double expected[4] = {0, 24, 4, 1}; /* prod, max, min of 1..4 (sum above) */
  for (int op = oxcclProd; op <= oxcclMin; op++) {
    for (size_t i = 0; i < C; i++) x[i] = g_rank + 1;
    OK(oxcclAllReduce(x, y, C, oxcclInt32, (oxcclRedOp_t)op, comm, NULL));
    CHECK(y[0] == expected[op] && y[C - 1] == expected[op], "op %d: %d", op, y[0]);
  }
  float* f = xcalloc(C, sizeof *f);
  for (size_t i = 0; i < C; i++) f[i] = val(g_rank, i);
  OK(oxcclAllReduce(f, f, C, oxcclFloat, oxcclSum, comm, NULL));
  for (size_t i = 0; i < C; i++) CHECK(f[i] == 10.0f + 4.0f * (float)(i % 7), "[%zu] %g", i, f[i]);
  free(f);
}

/* Broadcast and Reduce, with the buffers NCCL leaves unused passed as NULL. */
static void test_rooted(oxcclComm_t comm) {
  float* buf = xcalloc(C, sizeof *buf);
  float* other = xcalloc(C, sizeof *other);
  for (size_t i = 0; i < C; i++) buf[i] = val(g_rank, i);
  const float* send = g_rank == 1 ? buf : NULL;
  OK(oxcclBroadcast(send, other, C, oxcclFloat, 1, comm, NULL));
  for (size_t i = 0; i < C; i++) CHECK(other[i] == val(1, i), "broadcast [%zu]", i);
  OK(oxcclBroadcast(buf, buf, C, oxcclFloat, 3, comm, NULL));
  for (size_t i = 0; i < C; i++) CHECK(buf[i] == val(3, i), "broadcast in place [%zu]", i);

  for (size_t i = 0; i < C; i++) buf[i] = val(g_rank, i);
  memset(other, 0, C * sizeof *other);
  OK(oxcclReduce(buf, g_rank == 2 ? other : NULL, C, oxcclFloat, oxcclMax, 2, comm, NULL));
  if (g_rank == 2)
    for (size_t i = 0; i < C; i++) CHECK(other[i] == val(3, i), "reduce [%zu] %g", i, other[i]);
  OK(oxcclReduce(buf, buf, C, oxcclFloat, oxcclSum, 0, comm, NULL));
  if (g_rank == 0)
    for (size_t i = 0; i < C; i++) CHECK(buf[i] == 10.0f + 4.0f * (float)(i % 7), "reduce in place");
  free(buf);
  free(other);
}

/* AllGather, ReduceScatter and AlltoAll. */
static void test_blocks(oxcclComm_t comm) {
  const size_t n = (size_t)g_nranks, me = (size_t)g_rank;
  float* small = xcalloc(C, sizeof *small);
  float* big = xcalloc(n * C, sizeof *big);
  float* big2 = xcalloc(n * C, sizeof *big2);
  for (size_t i = 0; i < C; i++) small[i] = val(g_rank, i);
  OK(oxcclAllGather(small, big, C, oxcclFloat, comm, NULL));
  for (size_t i = 0; i < n * C; i++) CHECK(big[i] == val((int)(i / C), i % C), "allgather [%zu]", i);
  memset(big, 0, n * C * sizeof *big);
  for (size_t i = 0; i < C; i++) big[me * C + i] = val(g_rank, i);
  OK(oxcclAllGather(big + me * C, big, C, oxcclFloat, comm, NULL));
  for (size_t i = 0; i < n * C; i++) CHECK(big[i] == val((int)(i / C), i % C), "in place [%zu]", i);

  for (size_t i = 0; i < n * C; i++) big[i] = val(g_rank, i);
  OK(oxcclReduceScatter(big, small, C, oxcclFloat, oxcclSum, comm, NULL));
  for (size_t i = 0; i < C; i++)
    CHECK(small[i] == 10.0f + 4.0f * (float)((me * C + i) % 7), "reducescatter [%zu]", i);
  OK(oxcclReduceScatter(big, big + me * C, C, oxcclFloat, oxcclSum, comm, NULL));
  for (size_t i = 0; i < C; i++) CHECK(big[me * C + i] == small[i], "in place [%zu]", i);

  for (size_t p = 0; p < n; p++)
    for (size_t i = 0; i < C; i++) big[p * C + i] = (float)(me * 100 + p + i % 5);
  OK(oxcclAlltoAll(big, big2, C, oxcclFloat, comm, NULL));
  for (size_t p = 0; p < n; p++)
    for (size_t i = 0; i < C; i++)
      CHECK(big2[p * C + i] == (float)(p * 100 + me + i % 5), "alltoall [%zu][%zu]", p, i);
  free(small);
  free(big);
  free(big2);
}

/* Gather and Scatter, out of place (NULL where NCCL leaves the buffer unused) and in
 * place. */
static void test_gather_scatter(oxcclComm_t comm) {
  const size_t n = (size_t)g_nranks, me = (size_t)g_rank;
  float* small = xcalloc(C, sizeof *small);
  float* big = xcalloc(n * C, sizeof *big);
  for (size_t i = 0; i < C; i++) small[i] = val(g_rank, i);
  OK(oxcclGather(small, g_rank == 3 ? big : NULL, C, oxcclFloat, 3, comm, NULL));
  if (g_rank == 3)
    for (size_t i = 0; i < n * C; i++) CHECK(big[i] == val((int)(i / C), i % C), "gather [%zu]", i);
  memset(big, 0, n * C * sizeof *big);
  for (size_t i = 0; i < C; i++) big[me * C + i] = val(g_rank, i);
  OK(oxcclGather(big + me * C, big, C, oxcclFloat, 0, comm, NULL));
  if (g_rank == 0)
    for (size_t i = 0; i < n * C; i++) CHECK(big[i] == val((int)(i / C), i % C), "in place [%zu]", i);

  for (size_t i = 0; i < n * C; i++) big[i] = (float)i;
  memset(small, 0, C * sizeof *small);
  OK(oxcclScatter(g_rank == 0 ? big : NULL, small, C, oxcclFloat, 0, comm, NULL));
  for (size_t i = 0; i < C; i++) CHECK(small[i] == (float)(me * C + i), "scatter [%zu]", i);
  for (size_t i = 0; i < n * C; i++) big[i] = g_rank == 2 ? (float)(3 * i) : -1.0f;
  OK(oxcclScatter(big, big + me * C, C, oxcclFloat, 2, comm, NULL));
  for (size_t i = 0; i < C; i++)
    CHECK(big[me * C + i] == (float)(3 * (me * C + i)), "scatter in place [%zu]", i);
  free(small);
  free(big);
}

/* AllGatherV and ReduceScatterV over blocks with gaps, and AlltoAllV. */
static void test_vectors(oxcclComm_t comm) {
  const int n = g_nranks, me = g_rank;
  size_t counts[4], displs[4], at = 0;
  for (int r = 0; r < n; r++) {
    counts[r] = 100 * (size_t)(r + 1);
    displs[r] = at;
    at += counts[r] + 3;
  }
  const size_t extent = at;
  float* mine = xcalloc(counts[me], sizeof *mine);
  float* all = xcalloc(extent, sizeof *all);
  for (size_t i = 0; i < counts[me]; i++) mine[i] = val(me, i);
  OK(oxcclAllGatherV(mine, counts[me], all, counts, displs, oxcclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < counts[r]; i++) CHECK(all[displs[r] + i] == val(r, i), "agv %d %zu", r, i);
  memset(all, 0, extent * sizeof *all);
  memcpy(all + displs[me], mine, counts[me] * sizeof *mine);
  OK(oxcclAllGatherV(all + displs[me], counts[me], all, counts, displs, oxcclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < counts[r]; i++) CHECK(all[displs[r] + i] == val(r, i), "in place %d", r);

  for (size_t i = 0; i < extent; i++) all[i] = val(me, i);
  OK(oxcclReduceScatterV(all, counts, displs, mine, counts[me], oxcclFloat, oxcclMin, comm, NULL));
  for (size_t i = 0; i < counts[me]; i++) CHECK(mine[i] == val(0, displs[me] + i), "rsv %zu", i);
  OK(oxcclReduceScatterV(all, counts, displs, all + displs[me], counts[me], oxcclFloat, oxcclSum,
                         comm, NULL));
  for (size_t i = 0; i < counts[me]; i++)
    CHECK(all[displs[me] + i] == 10.0f + 4.0f * (float)((displs[me] + i) % 7), "in place %zu", i);
  free(mine);
  free(all);

  size_t sc[4], sd[4], rc[4], rd[4], s_at = 0, r_at = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = (size_t)((me + p) % 3 + 1) * 10;
    rc[p] = (size_t)((p + me) % 3 + 1) * 10; /* rank p's sendcounts[me] */
    sd[p] = s_at;
    rd[p] = r_at;
    s_at += sc[p];
    r_at += rc[p];
  }
  int32_t* s = xcalloc(s_at, sizeof *s);
  int32_t* r = xcalloc(r_at, sizeof *r);
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < sc[p]; i++) s[sd[p] + i] = me * 1000 + p * 100 + (int)i;
  OK(oxcclAlltoAllV(s, sc, sd, r, rc, rd, oxcclInt32, comm, NULL));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < rc[p]; i++)
      CHECK(r[rd[p] + i] == p * 1000 + me * 100 + (int)i, "alltoallv from %d [%zu]", p, i);
  free(s);
  free(r);
}

/* Single sends and receives (no group), and a barrier. */
static void test_p2p_and_barrier(oxcclComm_t comm) {
  double out[64], in[64];
  for (int i = 0; i < 64; i++) out[i] = g_rank * 1000 + i;
  int partner = g_rank ^ 1;
  if (g_rank % 2 == 0) {
    OK(oxcclSend(out, 64, oxcclDouble, partner, comm, NULL));
    OK(oxcclRecv(in, 64, oxcclDouble, partner, comm, NULL));
  } else {
    OK(oxcclRecv(in, 64, oxcclDouble, partner, comm, NULL));
    OK(oxcclSend(out, 64, oxcclDouble, partner, comm, NULL));
  }
  for (int i = 0; i < 64; i++) CHECK(in[i] == partner * 1000 + i, "recv [%d] %g", i, in[i]);
  OK(oxcclBarrier(comm, NULL));
  OK(oxcclAllReduce(NULL, NULL, 0, oxcclFloat, oxcclSum, comm, NULL)); /* count 0: NULL ok */
}

void test_collectives(oxcclComm_t comm) {
  test_all_reduce(comm);
  test_rooted(comm);
  test_blocks(comm);
  test_gather_scatter(comm);
  test_vectors(comm);
  test_p2p_and_barrier(comm);
}
