/* Every argument error of every collective: oxcclInvalidArgument with a message, before
 * anything reaches another rank (the closing AllReduce shows the ranks are still in
 * step). */
#include "common.h"

#define HUGE_COUNT (SIZE_MAX / 2)

/* The errors every collective shares, shown on AllReduce, plus its own. */
static void all_reduce_errors(oxcclComm_t comm, float* a, float* b) {
  INVALID("comm is NULL", oxcclAllReduce(a, b, C, oxcclFloat, oxcclSum, NULL, NULL));
  INVALID("not a live handle", oxcclAllReduce(a, b, C, oxcclFloat, oxcclSum, BOGUS_COMM, NULL));
  INVALID("has no streams", oxcclAllReduce(a, b, C, oxcclFloat, oxcclSum, comm, SOME_STREAM));
  INVALID("datatype 10 is not", oxcclAllReduce(a, b, C, (oxcclDataType_t)10, oxcclSum, comm, NULL));
  INVALID("datatype -1 is not", oxcclAllReduce(a, b, C, (oxcclDataType_t)-1, oxcclSum, comm, NULL));
  INVALID("oxcclAvg", oxcclAllReduce(a, b, C, oxcclFloat, oxcclAvg, comm, NULL));
  INVALID("user-defined", oxcclAllReduce(a, b, C, oxcclFloat, (oxcclRedOp_t)99, comm, NULL));
  INVALID("sendbuff is NULL", oxcclAllReduce(NULL, b, C, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("recvbuff is NULL", oxcclAllReduce(a, NULL, C, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("not aligned to the data type's 4",
          oxcclAllReduce(a, (char*)b + 2, C - 1, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("not aligned to the data type's 8",
          oxcclAllReduce(a, (char*)b + 4, 10, oxcclDouble, oxcclSum, comm, NULL));
  INVALID("overflow", oxcclAllReduce(a, b, HUGE_COUNT, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("end of the address space",
          oxcclAllReduce(a, (void*)(UINTPTR_MAX - 63), 32, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("overlap but are not this operator's in-place form",
          oxcclAllReduce(a, a + 1, C - 1, oxcclFloat, oxcclSum, comm, NULL));
}

static void rooted_errors(oxcclComm_t comm, float* a, float* b) {
  const int n = g_nranks;
  INVALID("root -1 is not a rank", oxcclBroadcast(a, b, C, oxcclFloat, -1, comm, NULL));
  INVALID("root 4 is not a rank of this communicator (0 to 3)",
          oxcclBroadcast(a, b, C, oxcclFloat, n, comm, NULL));
  INVALID("sendbuff is NULL", oxcclBroadcast(NULL, b, C, oxcclFloat, g_rank, comm, NULL));
  INVALID("recvbuff is NULL", oxcclBroadcast(a, NULL, C, oxcclFloat, g_rank, comm, NULL));
  INVALID("has no streams", oxcclBroadcast(a, b, C, oxcclFloat, 0, comm, SOME_STREAM));
  INVALID("root 9", oxcclReduce(a, b, C, oxcclFloat, oxcclSum, 9, comm, NULL));
  INVALID("oxcclAvg", oxcclReduce(a, b, C, oxcclFloat, oxcclAvg, 0, comm, NULL));
  INVALID("recvbuff is NULL", oxcclReduce(a, NULL, C, oxcclFloat, oxcclSum, g_rank, comm, NULL));
  INVALID("sendbuff is NULL", oxcclReduce(NULL, b, C, oxcclFloat, oxcclSum, 0, comm, NULL));
  INVALID("datatype 12", oxcclReduce(a, b, C, (oxcclDataType_t)12, oxcclSum, 0, comm, NULL));
  INVALID("root -3", oxcclGather(a, b, C, oxcclFloat, -3, comm, NULL));
  INVALID("sendbuff is NULL", oxcclGather(NULL, b, C, oxcclFloat, 0, comm, NULL));
  INVALID("recvbuff is NULL", oxcclGather(a, NULL, C, oxcclFloat, g_rank, comm, NULL));
  INVALID("times 4 overflows", oxcclGather(a, b, HUGE_COUNT, oxcclFloat, 0, comm, NULL));
  INVALID("root 4", oxcclScatter(a, b, C, oxcclFloat, n, comm, NULL));
  INVALID("sendbuff is NULL", oxcclScatter(NULL, b, C, oxcclFloat, g_rank, comm, NULL));
  INVALID("recvbuff is NULL", oxcclScatter(a, NULL, C, oxcclFloat, 0, comm, NULL));
  INVALID("comm is NULL", oxcclScatter(a, b, C, oxcclFloat, 0, NULL, NULL));
}

static void block_errors(oxcclComm_t comm, float* a, float* big) {
  const size_t me = (size_t)g_rank;
  INVALID("sendcount 9223372036854775807 times 4 overflows",
          oxcclAllGather(a, big, HUGE_COUNT, oxcclFloat, comm, NULL));
  INVALID("recvbuff is NULL", oxcclAllGather(a, NULL, C, oxcclFloat, comm, NULL));
  INVALID("overlap", oxcclAllGather(big + me * C + 1, big, C - 1, oxcclFloat, comm, NULL));
  INVALID("datatype 11", oxcclAllGather(a, big, C, (oxcclDataType_t)11, comm, NULL));
  INVALID("sendbuff is NULL", oxcclReduceScatter(NULL, a, C, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("oxcclAvg", oxcclReduceScatter(big, a, C, oxcclFloat, oxcclAvg, comm, NULL));
  INVALID("overlap", oxcclReduceScatter(big, big + 1, C, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("has no streams", oxcclReduceScatter(big, a, C, oxcclFloat, oxcclSum, comm, SOME_STREAM));
  INVALID("overlap", oxcclAlltoAll(big, big, C, oxcclFloat, comm, NULL));
  INVALID("times 4 overflows", oxcclAlltoAll(big, a, HUGE_COUNT, oxcclFloat, comm, NULL));
  INVALID("not a live handle", oxcclAlltoAll(big, a, C, oxcclFloat, BOGUS_COMM, NULL));
}

static void vector_errors(oxcclComm_t comm, float* a, float* big) {
  size_t counts[4] = {10, 10, 10, 10}, displs[4] = {0, 10, 20, 30};
  size_t same[4] = {0, 0, 0, 0}, wrapping[4] = {SIZE_MAX, 10, 20, 30};
  const size_t me = (size_t)g_rank;
  INVALID("recvcounts is NULL", oxcclAllGatherV(a, 10, big, NULL, displs, oxcclFloat, comm, NULL));
  INVALID("displs is NULL", oxcclAllGatherV(a, 10, big, counts, NULL, oxcclFloat, comm, NULL));
  INVALID("recvcounts (", oxcclAllGatherV(a, 10, big, (size_t*)((char*)counts + 1), displs,
                                          oxcclFloat, comm, NULL));
  INVALID("sendcount 11 differs from recvcounts",
          oxcclAllGatherV(a, 11, big, counts, displs, oxcclFloat, comm, NULL));
  INVALID("overflows", oxcclAllGatherV(a, 10, big, counts, wrapping, oxcclFloat, comm, NULL));
  INVALID("bad counts or displacements",
          oxcclAllGatherV(a, 10, big, counts, same, oxcclFloat, comm, NULL));
  INVALID("sendcounts is NULL",
          oxcclReduceScatterV(big, NULL, displs, a, 10, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("recvcount 9 differs from sendcounts",
          oxcclReduceScatterV(big, counts, displs, a, 9, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("oxcclAvg",
          oxcclReduceScatterV(big, counts, displs, a, 10, oxcclFloat, oxcclAvg, comm, NULL));
  INVALID("overlap", oxcclReduceScatterV(big, counts, displs, big + displs[me] + 1, 10,
                                         oxcclFloat, oxcclSum, comm, NULL));
  INVALID("sdispls is NULL",
          oxcclAlltoAllV(big, counts, NULL, a, counts, displs, oxcclFloat, comm, NULL));
  INVALID("rdispls is NULL",
          oxcclAlltoAllV(big, counts, displs, a, counts, NULL, oxcclFloat, comm, NULL));
  INVALID("overflows",
          oxcclAlltoAllV(big, counts, wrapping, big, counts, displs, oxcclFloat, comm, NULL));
  INVALID("overlap", oxcclAlltoAllV(big, counts, displs, big + 5, counts, displs, oxcclFloat,
                                    comm, NULL));
  INVALID("has no streams",
          oxcclAlltoAllV(big, counts, displs, a, counts, displs, oxcclFloat, comm, SOME_STREAM));
}

static void p2p_errors(oxcclComm_t comm, float* a) {
  INVALID("peer -1 is not a rank", oxcclSend(a, C, oxcclFloat, -1, comm, NULL));
  INVALID("peer 4 is not a rank", oxcclSend(a, C, oxcclFloat, 4, comm, NULL));
  INVALID("sendbuff is NULL", oxcclSend(NULL, C, oxcclFloat, 0, comm, NULL));
  INVALID("datatype 10", oxcclSend(a, C, (oxcclDataType_t)10, 0, comm, NULL));
  INVALID("has no streams", oxcclSend(a, C, oxcclFloat, 0, comm, SOME_STREAM));
  INVALID("comm is NULL", oxcclSend(a, C, oxcclFloat, 0, NULL, NULL));
  INVALID("peer 7", oxcclRecv(a, C, oxcclFloat, 7, comm, NULL));
  INVALID("recvbuff is NULL", oxcclRecv(NULL, C, oxcclFloat, 0, comm, NULL));
  INVALID("not aligned", oxcclRecv((char*)a + 1, 4, oxcclInt32, 0, comm, NULL));
  INVALID("overflow", oxcclRecv(a, HUGE_COUNT, oxcclFloat, 0, comm, NULL));
  INVALID("not a live handle", oxcclRecv(a, C, oxcclFloat, 0, BOGUS_COMM, NULL));
  INVALID("comm is NULL", oxcclBarrier(NULL, NULL));
  INVALID("has no streams", oxcclBarrier(comm, SOME_STREAM));
}

void test_errors(oxcclComm_t comm) {
  float* a = xcalloc(C, sizeof *a);
  float* b = xcalloc(C, sizeof *b);
  float* big = xcalloc((size_t)g_nranks * C, sizeof *big);
  all_reduce_errors(comm, a, b);
  rooted_errors(comm, a, b);
  block_errors(comm, a, big);
  vector_errors(comm, a, big);
  p2p_errors(comm, a);
  for (size_t i = 0; i < C; i++) a[i] = (float)g_rank;
  OK(oxcclAllReduce(a, b, C, oxcclFloat, oxcclSum, comm, NULL));
  CHECK(b[0] == 6.0f && b[C - 1] == 6.0f, "still in step: %g", b[0]);
  free(a);
  free(b);
  free(big);
}
