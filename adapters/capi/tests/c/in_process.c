/* oxcclCommInitAll: the ranks of one process driven from one thread by groups, a group
 * mixing them with the job's communicator, graphs of in-process ranks, and an abort seen
 * by the other ranks. Rank 0 of the job runs these; the other ranks only take part in
 * the mixed group's job-wide AllReduce. */
#include "common.h"

#define N 4

static void test_group_calls(oxcclComm_t comms[N]) {
  float buf[N][C];
  for (int r = 0; r < N; r++)
    for (size_t i = 0; i < C; i++) buf[r][i] = val(r, i);
  OK(oxcclGroupStart());
  for (int r = 0; r < N; r++) OK(oxcclAllReduce(buf[r], buf[r], C, oxcclFloat, oxcclSum, comms[r], NULL));
  OK(oxcclGroupEnd());
  for (int r = 0; r < N; r++)
    for (size_t i = 0; i < C; i++) CHECK(buf[r][i] == 10.0f + 4.0f * (float)(i % 7), "[%d][%zu]", r, i);

  int out[N][8], in[N][8];
  for (int r = 0; r < N; r++)
    for (int i = 0; i < 8; i++) out[r][i] = r * 10 + i;
  OK(oxcclGroupStart());
  for (int r = 0; r < N; r++) {
    OK(oxcclSend(out[r], 8, oxcclInt32, (r + 1) % N, comms[r], NULL));
    OK(oxcclRecv(in[r], 8, oxcclInt32, (r + N - 1) % N, comms[r], NULL));
  }
  OK(oxcclGroupEnd());
  for (int r = 0; r < N; r++) CHECK(in[r][7] == ((r + N - 1) % N) * 10 + 7, "ring %d", r);

  /* Two ranks' receive buffers overlap: refused before anything runs. */
  OK(oxcclGroupStart());
  for (int r = 0; r < N; r++)
    OK(oxcclAllReduce(buf[r], buf[r == 1 ? 0 : r], C, oxcclFloat, oxcclSum, comms[r], NULL));
  INVALID("another call run with it", oxcclGroupEnd());
  CHECK(buf[0][0] == 10.0f, "nothing ran: %g", buf[0][0]);
}

/* One group: the job's communicator (other processes take part) and the in-process ranks
 * (another device: run side by side). */
static void test_mixed_group(oxcclComm_t job, oxcclComm_t comms[N]) {
  float x[C], local[N][C];
  for (size_t i = 0; i < C; i++) x[i] = 1.0f;
  for (int r = 0; r < N; r++)
    for (size_t i = 0; i < C; i++) local[r][i] = 2.0f;
  OK(oxcclGroupStart());
  OK(oxcclAllReduce(x, x, C, oxcclFloat, oxcclSum, job, NULL));
  for (int r = 0; r < N; r++) OK(oxcclAllReduce(local[r], local[r], C, oxcclFloat, oxcclSum, comms[r], NULL));
  OK(oxcclGroupEnd());
  CHECK(x[C - 1] == 4.0f && local[3][C - 1] == 8.0f, "mixed: %g %g", x[C - 1], local[3][C - 1]);
}

/* One thread captures, compiles and launches the graphs of the in-process ranks. */
static void test_graphs_in_process(oxcclComm_t comms[N]) {
  float buf[N][C];
  oxcclGraph_t graphs[N];
  for (int r = 0; r < N; r++) OK(oxcclGraphCaptureBegin(comms[r]));
  OK(oxcclGroupStart());
  for (int r = 0; r < N; r++) OK(oxcclAllReduce(buf[r], buf[r], C, oxcclFloat, oxcclMax, comms[r], NULL));
  OK(oxcclGroupEnd());
  OK(oxcclGroupStart());
  for (int r = 0; r < N; r++) OK(oxcclGraphCaptureEnd(comms[r], &graphs[r]));
  OK(oxcclGroupEnd());
  for (int iter = 0; iter < 2; iter++) {
    for (int r = 0; r < N; r++)
      for (size_t i = 0; i < C; i++) buf[r][i] = (float)(r * (iter + 1)) + (float)i;
    OK(oxcclGroupStart());
    for (int r = 0; r < N; r++) OK(oxcclGraphLaunch(graphs[r], NULL));
    OK(oxcclGroupEnd());
    for (int r = 0; r < N; r++) CHECK(buf[r][5] == (float)(3 * (iter + 1) + 5), "graph %d %g", r, buf[r][5]);
  }
  for (int r = 0; r < N; r++) OK(oxcclGraphDestroy(graphs[r]));
}

/* Ranks capturing different sequences are all told, naming the step, and work on. */
static void test_capture_mismatch(oxcclComm_t comms[N]) {
  float x[N][16];
  oxcclGraph_t graphs[N];
  for (int r = 0; r < N; r++) OK(oxcclGraphCaptureBegin(comms[r]));
  OK(oxcclGroupStart());
  for (int r = 0; r < N; r++)
    OK(oxcclAllReduce(x[r], x[r], r == 0 ? 8 : 16, oxcclFloat, oxcclSum, comms[r], NULL));
  OK(oxcclGroupEnd());
  OK(oxcclGroupStart());
  for (int r = 0; r < N; r++) OK(oxcclGraphCaptureEnd(comms[r], &graphs[r]));
  USAGE("step 0 differs in its count", oxcclGroupEnd());
  for (int r = 0; r < N; r++)
    for (int i = 0; i < 16; i++) x[r][i] = 1.0f;
  OK(oxcclGroupStart());
  for (int r = 0; r < N; r++) OK(oxcclAllReduce(x[r], x[r], 16, oxcclFloat, oxcclSum, comms[r], NULL));
  OK(oxcclGroupEnd());
  CHECK(x[2][15] == 4.0f, "the communicators work on: %g", x[2][15]);
}

/* A rank aborted by its user: the others' next call fails at once, naming it, and their
 * async error says so; a destroyed communicator's deferred call is refused. */
static void test_abort_in_process(oxcclComm_t comms[N]) {
  float x[C];
  OK(oxcclGroupStart());
  OK(oxcclAllReduce(x, x, C, oxcclFloat, oxcclSum, comms[2], NULL));
  OK(oxcclCommDestroy(comms[2]));
  USAGE("destroyed before this deferred call ran", oxcclGroupEnd());
  OK(oxcclCommAbort(comms[3]));
  oxcclResult_t r = oxcclAllReduce(x, x, C, oxcclFloat, oxcclSum, comms[0], NULL);
  CHECK(r == oxcclRemoteError, "after a peer's abort: %d (%s)", (int)r, oxcclGetLastError(NULL));
  CHECK(strstr(oxcclGetLastError(NULL), "aborted") != NULL, "%s", oxcclGetLastError(NULL));
  oxcclResult_t async = oxcclSuccess;
  OK(oxcclCommGetAsyncError(comms[0], &async));
  CHECK(async == oxcclRemoteError, "async %d", (int)async);
  OK(oxcclCommGetAsyncError(comms[1], &async));
  CHECK(async == oxcclRemoteError, "the abort is reported before rank 1 made a call: %d",
        (int)async);
  OK(oxcclCommDestroy(comms[0]));
  OK(oxcclCommDestroy(comms[1]));
}

void test_in_process(oxcclComm_t job) {
  if (g_rank != 0) {
    float x[C];
    for (size_t i = 0; i < C; i++) x[i] = 1.0f;
    OK(oxcclAllReduce(x, x, C, oxcclFloat, oxcclSum, job, NULL));
    CHECK(x[0] == 4.0f, "mixed group's job-wide call: %g", x[0]);
    return;
  }
  oxcclComm_t comms[N];
  int devlist[N] = {3, 2, 1, 0};
  OK(oxcclCommInitAll(comms, N, devlist));
  int rank = -1;
  OK(oxcclCommUserRank(comms[2], &rank));
  CHECK(rank == 2, "in-process rank %d", rank);
  test_group_calls(comms);
  test_mixed_group(job, comms);
  test_graphs_in_process(comms);
  test_capture_mismatch(comms);
  test_abort_in_process(comms);
}
