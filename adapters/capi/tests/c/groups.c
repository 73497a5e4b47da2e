/* oxcclGroupStart/oxcclGroupEnd: deferral, nesting, several calls of one communicator,
 * fused sends and receives, and the errors that come from oxcclGroupEnd. */
#include "common.h"

static void test_deferral_and_nesting(oxcclComm_t comm) {
  float a[C], b[C];
  for (size_t i = 0; i < C; i++) a[i] = b[i] = 1.0f;
  OK(oxcclGroupStart());
  OK(oxcclGroupStart());
  OK(oxcclAllReduce(a, a, C, oxcclFloat, oxcclSum, comm, NULL));
  OK(oxcclGroupEnd());
  CHECK(a[0] == 1.0f, "nothing runs before the outermost end: %g", a[0]);
  OK(oxcclAllReduce(b, b, C, oxcclFloat, oxcclProd, comm, NULL));
  OK(oxcclBarrier(comm, NULL));
  OK(oxcclGroupEnd());
  CHECK(a[0] == 4.0f && a[C - 1] == 4.0f && b[0] == 1.0f, "after the end: %g %g", a[0], b[0]);
}

/* A ring (one send and one receive: the caller's buffers), then every rank sending a
 * block to every other (several sends: staged), in any order. */
static void test_fused_p2p(oxcclComm_t comm) {
  const int n = g_nranks, next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  int32_t out[C], in[C];
  for (int i = 0; i < C; i++) out[i] = g_rank * 10000 + i;
  OK(oxcclGroupStart());
  OK(oxcclRecv(in, C, oxcclInt32, prev, comm, NULL));
  OK(oxcclSend(out, C, oxcclInt32, next, comm, NULL));
  OK(oxcclGroupEnd());
  for (int i = 0; i < C; i++) CHECK(in[i] == prev * 10000 + i, "ring [%d] %d", i, in[i]);

  int64_t blocks[4][100], got[4][100];
  memset(got, 0, sizeof got);
  for (int p = 0; p < n; p++)
    for (int i = 0; i < 100; i++) blocks[p][i] = g_rank * 100 + p * 10 + i;
  OK(oxcclGroupStart());
  for (int k = 0; k < n; k++) {
    int p = (g_rank + k) % n, q = (g_rank + n - k) % n;
    if (p == g_rank) continue;
    OK(oxcclSend(blocks[p], 100, oxcclInt64, p, comm, NULL));
    OK(oxcclRecv(got[q], 100, oxcclInt64, q, comm, NULL));
  }
  OK(oxcclGroupEnd());
  for (int p = 0; p < n; p++)
    for (int i = 0; i < 100; i++)
      if (p != g_rank) CHECK(got[p][i] == p * 100 + g_rank * 10 + i, "from %d [%d]", p, i);
}

/* Ranks 0 and 1 exchange; ranks 2 and 3 take part with count 0. */
static void test_empty_parts(oxcclComm_t comm) {
  uint8_t x = (uint8_t)(g_rank + 7), y = 0;
  OK(oxcclGroupStart());
  if (g_rank < 2) {
    OK(oxcclSend(&x, 1, oxcclUint8, 1 - g_rank, comm, NULL));
    OK(oxcclRecv(&y, 1, oxcclUint8, 1 - g_rank, comm, NULL));
  } else {
    OK(oxcclSend(NULL, 0, oxcclUint8, 0, comm, NULL));
  }
  OK(oxcclGroupEnd());
  if (g_rank < 2) CHECK(y == (uint8_t)(1 - g_rank + 7), "got %d", y);
}

/* Errors from oxcclGroupEnd; each is met on every rank alike, so nothing runs anywhere and
 * the ranks stay in step (the closing AllReduce shows it). */
static void test_group_errors(oxcclComm_t comm) {
  USAGE("without a matching oxcclGroupStart", oxcclGroupEnd());
  float a[C], b[C];
  for (size_t i = 0; i < C; i++) a[i] = 1.0f;
  OK(oxcclGroupStart());
  OK(oxcclAllReduce(a, a, C, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("recvbuff is NULL", oxcclAllReduce(a, NULL, C, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("the group ran nothing", oxcclGroupEnd());
  CHECK(a[0] == 1.0f, "nothing ran: %g", a[0]);

  const int peer = g_rank ^ 1;
  OK(oxcclGroupStart());
  OK(oxcclSend(a, C, oxcclFloat, peer, comm, NULL));
  OK(oxcclSend(a, C, oxcclFloat, peer, comm, NULL));
  OK(oxcclRecv(b, C, oxcclFloat, peer, comm, NULL));
  OK(oxcclRecv(b + 1, C - 1, oxcclFloat, peer, comm, NULL));
  INVALID("another call run with it", oxcclGroupEnd());

  OK(oxcclAllReduce(a, b, C, oxcclFloat, oxcclSum, comm, NULL));
  CHECK(b[0] == 4.0f && b[C - 1] == 4.0f, "in step after the refusals: %g", b[0]);
}

void test_groups(oxcclComm_t comm) {
  test_deferral_and_nesting(comm);
  test_fused_p2p(comm);
  test_empty_parts(comm);
  test_group_errors(comm);
}
