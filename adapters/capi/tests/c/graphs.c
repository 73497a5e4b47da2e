/* Graph calls across the processes: capture (calls recorded, not run), compile, launch
 * many times on the captured buffers, and every refusal. */
#include "common.h"

static void fill(float* grads, int32_t* ring_out, int iter) {
  for (size_t i = 0; i < C; i++) grads[i] = (float)(g_rank + iter) + (float)(i % 3);
  for (size_t i = 0; i < C; i++) ring_out[i] = g_rank * 100 + iter;
}

/* A four-step graph: an in-place AllReduce, an AllGather of its result, a group's ring of
 * one send and one receive, and an in-place AllReduce of the gathered buffer. Steps that
 * reuse what an earlier one writes are allowed (the graph runs in parts). */
static oxcclGraph_t capture(oxcclComm_t comm, float* grads, float* gathered, int32_t* ring_out,
                            int32_t* ring_in) {
  const int n = g_nranks;
  USAGE("no graph capture is open", oxcclGraphCaptureEnd(comm, &(oxcclGraph_t){NULL}));
  OK(oxcclGraphCaptureBegin(comm));
  USAGE("already open", oxcclGraphCaptureBegin(comm));
  fill(grads, ring_out, 0);
  OK(oxcclAllReduce(grads, grads, C, oxcclFloat, oxcclSum, comm, NULL));
  CHECK(grads[0] == (float)g_rank, "a captured call does not run: %g", grads[0]);
  OK(oxcclAllGather(grads, gathered, C, oxcclFloat, comm, NULL));
  OK(oxcclGroupStart());
  OK(oxcclSend(ring_out, C, oxcclInt32, (g_rank + 1) % n, comm, NULL));
  OK(oxcclRecv(ring_in, C, oxcclInt32, (g_rank + n - 1) % n, comm, NULL));
  OK(oxcclGroupEnd());
  OK(oxcclAllReduce(gathered, gathered, (size_t)n * C, oxcclFloat, oxcclSum, comm, NULL));
  USAGE("capture is open", oxcclCommFinalize(comm));
  INVALID("graph is NULL", oxcclGraphCaptureEnd(comm, NULL));
  oxcclGraph_t graph = NULL;
  OK(oxcclGraphCaptureEnd(comm, &graph));
  CHECK(graph != NULL, "a graph");
  return graph;
}

static void launch_and_check(oxcclGraph_t graph, float* grads, float* gathered,
                             int32_t* ring_out, int32_t* ring_in, int iter) {
  const int n = g_nranks, prev = (g_rank + n - 1) % n;
  fill(grads, ring_out, iter);
  OK(oxcclGraphLaunch(graph, NULL));
  const float base = (float)(0 + 1 + 2 + 3 + 4 * iter);
  for (size_t i = 0; i < C; i++) CHECK(grads[i] == base + 4.0f * (float)(i % 3), "[%zu]", i);
  for (size_t i = 0; i < (size_t)n * C; i++)
    CHECK(gathered[i] == 4.0f * grads[i % C], "gathered [%zu] %g", i, gathered[i]);
  for (size_t i = 0; i < C; i++) CHECK(ring_in[i] == prev * 100 + iter, "ring [%zu]", i);
}

void test_graphs(oxcclComm_t comm) {
  const int n = g_nranks;
  float* grads = xcalloc(C, sizeof *grads);
  float* gathered = xcalloc((size_t)n * C, sizeof *gathered);
  int32_t* ring_out = xcalloc(C, sizeof *ring_out);
  int32_t* ring_in = xcalloc(C, sizeof *ring_in);
  oxcclGraph_t graph = capture(comm, grads, gathered, ring_out, ring_in);
  for (int iter = 1; iter <= 3; iter++) launch_and_check(graph, grads, gathered, ring_out, ring_in, iter);
  INVALID("has no streams", oxcclGraphLaunch(graph, SOME_STREAM));
  INVALID("graph is NULL", oxcclGraphLaunch(NULL, NULL));
  INVALID("graph is NULL", oxcclGraphDestroy(NULL));
  INVALID("comm is NULL", oxcclGraphCaptureBegin(NULL));
  INVALID("comm is NULL", oxcclGraphCaptureEnd(NULL, &graph));
  OK(oxcclGraphDestroy(graph));
  INVALID("not a live handle", oxcclGraphDestroy(graph));
  INVALID("not a live handle", oxcclGraphLaunch(graph, NULL));
  free(grads);
  free(gathered);
  free(ring_out);
  free(ring_in);
}
