/* The C ABI test: one process per rank, started by tests/c_abi.rs with
 *   OXCCL_TEST_RANK, OXCCL_TEST_NRANKS (4) and OXCCL_TEST_DIR (a fresh directory).
 * Rank 0 calls oxcclGetUniqueId (twice: two jobs) and writes the ids to
 * $OXCCL_TEST_DIR/ids (written to a temporary name, then renamed); the other ranks wait
 * for the file. Every exported function is called, with its error paths; a process
 * prints "rank R ok" and exits 0 when every check passed. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>
#include <unistd.h>

#include "common.h"

int g_rank;
int g_nranks;
int g_failures;

void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n, size);
  if (p == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", g_rank);
    exit(1);
  }
  return p;
}

static int env_int(const char* name) {
  const char* v = getenv(name);
  if (v == NULL) {
    fprintf(stderr, "%s is not set\n", name);
    exit(2);
  }
  return atoi(v);
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Rank 0 makes the two jobs' ids and writes them; the others read them. */
static void exchange_ids(oxcclUniqueId ids[2]) {
  char path[4096], tmp[4096];
  snprintf(path, sizeof path, "%s/ids", getenv("OXCCL_TEST_DIR"));
  snprintf(tmp, sizeof tmp, "%s/ids.tmp", getenv("OXCCL_TEST_DIR"));
  if (g_rank == 0) {
    INVALID("uniqueId is NULL", oxcclGetUniqueId(NULL));
    OK(oxcclGetUniqueId(&ids[0]));
    OK(oxcclGetUniqueId(&ids[1]));
    CHECK(memcmp(&ids[0], &ids[1], sizeof ids[0]) != 0, "two jobs, two ids");
    FILE* f = fopen(tmp, "wb");
    CHECK(f != NULL && fwrite(ids, sizeof ids[0], 2, f) == 2 && fclose(f) == 0, "write");
    CHECK(rename(tmp, path) == 0, "rename");
    return;
  }
  for (int waited = 0; waited < 60000; waited += 10) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      size_t got = fread(ids, sizeof ids[0], 2, f);
      fclose(f);
      if (got == 2) return;
    }
    sleep_ms(10);
  }
  fprintf(stderr, "rank %d: no ids from rank 0 after 60 s\n", g_rank);
  exit(1);
}

static void test_library(void) {
  int version = 0;
  OK(oxcclGetVersion(&version));
  CHECK(version == OXCCL_VERSION_CODE, "version %d", version);
  INVALID("version is NULL", oxcclGetVersion(NULL));
  char raw[8];
  INVALID("not aligned", oxcclGetVersion((int*)(raw + 1)));
  CHECK(strstr(oxcclGetLastError(NULL), "oxcclGetVersion") != NULL, "names the call");
  CHECK(strstr(oxcclGetLastError(BOGUS_COMM), "oxcclGetVersion") != NULL, "any comm");
  for (int r = 0; r <= oxcclNumResults; r++) {
    const char* s = oxcclGetErrorString((oxcclResult_t)r);
    CHECK(s != NULL && s[0] != '\0', "string of %d", r);
    for (int q = 0; q < r; q++)
      CHECK(strcmp(s, oxcclGetErrorString((oxcclResult_t)q)) != 0, "%d and %d: %s", q, r, s);
  }
  CHECK(strstr(oxcclGetErrorString(oxcclInvalidArgument), "invalid argument") != NULL, "text");
  CHECK(strstr(oxcclGetErrorString((oxcclResult_t)99), "unknown") != NULL, "out of range");
}

/* Every refusal of the init calls comes before any rank joins. */
static void test_init_errors(const oxcclUniqueId* id) {
  oxcclComm_t comm = BOGUS_COMM;
  INVALID("comm is NULL", oxcclCommInitRank(NULL, g_nranks, *id, g_rank));
  INVALID("nranks 0", oxcclCommInitRank(&comm, 0, *id, g_rank));
  CHECK(comm == NULL, "a refused init leaves *comm NULL");
  INVALID("nranks -2", oxcclCommInitRank(&comm, -2, *id, 0));
  INVALID("rank -1", oxcclCommInitRank(&comm, g_nranks, *id, -1));
  INVALID("rank 4: pass 0 to 3", oxcclCommInitRank(&comm, g_nranks, *id, g_nranks));
  oxcclUniqueId junk;
  memset(&junk, 'x', sizeof junk);
  INVALID("commId is not an id", oxcclCommInitRank(&comm, g_nranks, junk, g_rank));

  INVALID("nranks 0", oxcclCommInitRankConfig(&comm, 0, *id, g_rank, NULL));
  oxcclConfig_t config = OXCCL_CONFIG_INITIALIZER;
  config.size = 8;
  INVALID("config->size is 8", oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.magic = 1;
  INVALID("config->magic", oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.version = 1;
  INVALID("is version 2", oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  INVALID("config->blocking is 2",
          oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.timeoutSeconds = 0;
  INVALID("config->timeoutSeconds is 0",
          oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.bufferSizeMiB = -5;
  INVALID("config->bufferSizeMiB", oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.hostThreads = 5000;
  INVALID("config->hostThreads", oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.zeroCopy = 7;
  INVALID("config->zeroCopy", oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.sharedBuffers = 2;
  INVALID("config->sharedBuffers is 2",
          oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  config = (oxcclConfig_t)OXCCL_CONFIG_INITIALIZER;
  config.algo = "all_reduce=no_such_algorithm";
  INVALID("no_such_algorithm", oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank, &config));
  char raw[sizeof(oxcclConfig_t) + 8];
  INVALID("config (", oxcclCommInitRankConfig(&comm, g_nranks, *id, g_rank,
                                              (oxcclConfig_t*)(raw + 1)));

  oxcclComm_t comms[4];
  int dup[4] = {0, 1, 1, 2}, negative[4] = {0, -1, 2, 3};
  INVALID("comms is NULL", oxcclCommInitAll(NULL, 4, NULL));
  INVALID("ndev 0", oxcclCommInitAll(comms, 0, NULL));
  INVALID("ndev -1", oxcclCommInitAll(comms, -1, NULL));
  INVALID("distinct non-negative", oxcclCommInitAll(comms, 4, dup));
  INVALID("distinct non-negative", oxcclCommInitAll(comms, 4, negative));
}

static void test_queries(oxcclComm_t comm) {
  int count = 0, rank = -1;
  OK(oxcclCommCount(comm, &count));
  OK(oxcclCommUserRank(comm, &rank));
  CHECK(count == g_nranks && rank == g_rank, "count %d rank %d", count, rank);
  INVALID("comm is NULL", oxcclCommCount(NULL, &count));
  INVALID("not a live handle", oxcclCommCount(BOGUS_COMM, &count));
  INVALID("count is NULL", oxcclCommCount(comm, NULL));
  INVALID("comm is NULL", oxcclCommUserRank(NULL, &rank));
  char raw[8];
  INVALID("rank (", oxcclCommUserRank(comm, (int*)(raw + 1)));
  oxcclResult_t async = oxcclInternalError;
  OK(oxcclCommGetAsyncError(comm, &async));
  CHECK(async == oxcclSuccess, "no failure yet: %d", (int)async);
  INVALID("asyncError is NULL", oxcclCommGetAsyncError(comm, NULL));
  INVALID("not a live handle", oxcclCommGetAsyncError(BOGUS_COMM, &async));
}

/* Memory from oxcclMemAlloc (collective) carries a call; frees are checked. */
static void test_memory(oxcclComm_t comm) {
  float *send = NULL, *recv = NULL;
  OK(oxcclMemAlloc(comm, (void**)&send, 1000 * sizeof(float)));
  OK(oxcclMemAlloc(comm, (void**)&recv, 1000 * sizeof(float)));
  CHECK(send != NULL && recv != NULL && ((uintptr_t)send & 4095) == 0, "page aligned");
  CHECK(recv[999] == 0.0f, "zeroed");
  for (int i = 0; i < 1000; i++) send[i] = (float)(g_rank + i);
  OK(oxcclAllReduce(send, recv, 1000, oxcclFloat, oxcclSum, comm, NULL));
  /* sum over ranks of (r + i) = 6 + 4i on 4 ranks */
  CHECK(recv[0] == 6.0f && recv[999] == 6.0f + 4.0f * 999, "sum %f %f", recv[0], recv[999]);
  OK(oxcclMemFree(send));
  OK(oxcclMemFree(recv));
  INVALID("not memory from oxcclMemAlloc", oxcclMemFree(recv));
  float stack = 0;
  INVALID("not memory from oxcclMemAlloc", oxcclMemFree(&stack));
  INVALID("not memory from oxcclMemAlloc", oxcclMemFree(NULL));
  void* p = NULL;
  INVALID("ptr is NULL", oxcclMemAlloc(comm, NULL, 8));
  INVALID("comm is NULL", oxcclMemAlloc(NULL, &p, 8));
  CHECK(p == NULL, "nothing allocated on a refusal");
}

/* Finalize refuses later calls; destroy frees; the handle is then unknown. */
static void test_finalize_destroy(oxcclComm_t comm) {
  float x = 1.0f;
  OK(oxcclCommFinalize(comm));
  USAGE("finalized", oxcclAllReduce(&x, &x, 1, oxcclFloat, oxcclSum, comm, NULL));
  USAGE("finalized", oxcclCommFinalize(comm));
  USAGE("finalized", oxcclGraphCaptureBegin(comm));
  int count = 0;
  OK(oxcclCommCount(comm, &count));
  CHECK(count == g_nranks, "queries still answer after finalize");
  OK(oxcclCommDestroy(comm));
  INVALID("not a live handle", oxcclCommDestroy(comm));
  INVALID("not a live handle", oxcclAllReduce(&x, &x, 1, oxcclFloat, oxcclSum, comm, NULL));
  INVALID("comm is NULL", oxcclCommFinalize(NULL));
  INVALID("comm is NULL", oxcclCommDestroy(NULL));
  INVALID("comm is NULL", oxcclCommAbort(NULL));
}

/* The last rank aborts its communicator at once; the others' first call, which cannot
 * finish without it, fails as a remote error, which is then their async error. */
static void test_abort(oxcclComm_t comm) {
  if (g_rank == g_nranks - 1) {
    OK(oxcclCommAbort(comm));
    INVALID("not a live handle", oxcclCommAbort(comm));
    return;
  }
  float x[4] = {1, 1, 1, 1};
  oxcclResult_t r = oxcclAllReduce(x, x, 4, oxcclFloat, oxcclSum, comm, NULL);
  CHECK(r == oxcclRemoteError, "a peer's abort is a remote error: %d (%s)", (int)r,
        oxcclGetLastError(NULL));
  oxcclResult_t async = oxcclSuccess;
  OK(oxcclCommGetAsyncError(comm, &async));
  CHECK(async == oxcclRemoteError, "async error %d", (int)async);
  OK(oxcclCommDestroy(comm));
}

int main(void) {
  g_rank = env_int("OXCCL_TEST_RANK");
  g_nranks = env_int("OXCCL_TEST_NRANKS");
  if (g_nranks != 4) {
    fprintf(stderr, "the test is written for 4 ranks\n");
    return 2;
  }
  test_library();
  oxcclUniqueId ids[2];
  exchange_ids(ids);
  test_init_errors(&ids[0]);

  oxcclComm_t comm = NULL, second = NULL;
  OK(oxcclCommInitRank(&comm, g_nranks, ids[0], g_rank));
  oxcclConfig_t config = OXCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.timeoutSeconds = 20;
  config.bufferSizeMiB = 4;
  config.hostThreads = 1;
  config.zeroCopy = 1;
  config.algo = "";
  OK(oxcclCommInitRankConfig(&second, g_nranks, ids[1], g_rank, &config));

  test_queries(comm);
  test_collectives(comm);
  test_groups(comm);
  test_errors(comm);
  test_graphs(comm);
  test_in_process(comm);
  test_memory(comm);
  test_finalize_destroy(comm);
  test_abort(second);

  if (g_failures != 0) {
    fprintf(stderr, "rank %d: %d checks failed\n", g_rank, g_failures);
    return 1;
  }
  printf("rank %d ok\n", g_rank);
  return 0;
}
