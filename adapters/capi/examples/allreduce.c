/* An AllReduce across processes through oxccl's C ABI, as a NCCL program would do it.
 *
 *   allreduce NRANKS RANK ID_FILE
 *
 * Start NRANKS processes, one per rank. Rank 0 creates the job's id and writes it to
 * ID_FILE (a file the other ranks can read: MPI_Bcast or a key-value store would do as
 * well); the others wait for it. Each rank then joins the job, sums a vector with every
 * other rank, checks the sum and prints it:
 *
 *   cc -I adapters/capi/include adapters/capi/examples/allreduce.c \
 *      -L target/debug -loxccl_capi -Wl,-rpath,$PWD/target/debug -o allreduce
 *   for r in 0 1 2 3; do ./allreduce 4 $r /tmp/oxccl-example.id & done; wait
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "oxccl.h"

#define COUNT (1 << 20)

#define CHECK_OXCCL(call)                                                          \
  do {                                                                             \
    oxcclResult_t r_ = (call);                                                     \
    if (r_ != oxcclSuccess) {                                                      \
      fprintf(stderr, "%s failed: %s: %s\n", #call, oxcclGetErrorString(r_),      \
              oxcclGetLastError(NULL));                                            \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* Rank 0 writes the id (to a temporary name, then renamed); the others wait for it. */
static oxcclUniqueId share_id(int rank, const char* path) {
  oxcclUniqueId id;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (rank == 0) {
    CHECK_OXCCL(oxcclGetUniqueId(&id));
    FILE* f = fopen(tmp, "wb");
    if (f == NULL || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      perror(path);
      exit(1);
    }
    return id;
  }
  struct timespec pause = {0, 10 * 1000 * 1000};
  for (int tries = 0; tries < 6000; tries++) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    nanosleep(&pause, NULL);
  }
  fprintf(stderr, "rank %d: no id in %s after a minute\n", rank, path);
  exit(1);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s NRANKS RANK ID_FILE\n", argv[0]);
    return 2;
  }
  int nranks = atoi(argv[1]), rank = atoi(argv[2]);
  oxcclUniqueId id = share_id(rank, argv[3]);

  oxcclComm_t comm;
  CHECK_OXCCL(oxcclCommInitRank(&comm, nranks, id, rank));

  float* send = malloc(COUNT * sizeof *send);
  float* recv = malloc(COUNT * sizeof *recv);
  if (send == NULL || recv == NULL) return 1;
  for (int i = 0; i < COUNT; i++) send[i] = (float)(rank + 1);

  /* NULL stream: the call blocks until this rank's part is done. */
  CHECK_OXCCL(oxcclAllReduce(send, recv, COUNT, oxcclFloat, oxcclSum, comm, NULL));

  const float expected = (float)nranks * (float)(nranks + 1) / 2.0f;
  for (int i = 0; i < COUNT; i++) {
    if (recv[i] != expected) {
      fprintf(stderr, "rank %d: recv[%d] = %g, expected %g\n", rank, i, recv[i], expected);
      return 1;
    }
  }
  printf("rank %d of %d: allreduce of %d floats = %g\n", rank, nranks, COUNT, recv[0]);

  CHECK_OXCCL(oxcclCommFinalize(comm));
  CHECK_OXCCL(oxcclCommDestroy(comm));
  free(send);
  free(recv);
  return 0;
}
