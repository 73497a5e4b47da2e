/*
 * oxccl.h: the C ABI of oxccl (crate oxccl-capi; link liboxccl_capi.so or liboxccl_capi.a).
 *
 * NCCL's shapes and numbers: a NCCL caller ports by renaming nccl* to oxccl*. Results keep
 * ncclResult_t's numbering, data types ncclDataType_t's and reduce ops ncclRedOp_t's; the
 * values oxccl cannot serve (ncclAvg, user-defined ops) are refused with oxcclInvalidArgument.
 *
 * What differs from NCCL, in short (the README's "C ABI" section says more):
 * - Every call is blocking: it returns when this rank's part is done. On the host device
 *   buffers are host memory and the stream argument, an opaque oxcclStream_t, must be NULL
 *   (oxcclInvalidArgument otherwise). On cuda (OXCCL_DEVICE=cuda) buffers are device
 *   pointers, checked against their allocation on the rank's GPU, and the stream is a
 *   cudaStream_t (NULL: the default stream): the call waits for the work queued on it
 *   when it runs (at oxcclGroupEnd in a group), so work queued after it sees its results;
 *   that wait is bounded by OXCCL_EXEC_TIMEOUT (config->timeoutSeconds), and an abort or a
 *   peer's failure ends it. A stream inside a CUDA graph capture is refused
 *   (oxcclInvalidUsage) when the call is made, a call to be recorded too, leaving the
 *   capture valid: record the calls with oxcclGraphCaptureBegin on another stream.
 * - Every argument is checked before anything runs (NULL pointers, buffers misaligned for
 *   the data type, counts whose byte size overflows, roots and peers out of range, unknown
 *   enum values, buffers that overlap without being NCCL's in-place form): the call returns
 *   oxcclInvalidArgument, oxcclGetLastError says why, and nothing is sent to the other ranks.
 * - Point-to-point calls are matched per communicator call: every rank of the communicator
 *   takes part in each send/recv call (or group of them); a rank with nothing to move
 *   passes a count-0 oxcclSend or oxcclRecv.
 *
 * The calls are thread-safe as NCCL's are: one thread per communicator at a time, except
 * oxcclCommAbort, which may come from any thread.
 */
#ifndef OXCCL_H_
#define OXCCL_H_

#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OXCCL_MAJOR 0
#define OXCCL_MINOR 1
#define OXCCL_PATCH 0
/* NCCL's encoding since 2.9: major * 10000 + minor * 100 + patch. */
#define OXCCL_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define OXCCL_VERSION_CODE OXCCL_VERSION(OXCCL_MAJOR, OXCCL_MINOR, OXCCL_PATCH)

/* Opaque handles. */
typedef struct oxcclComm* oxcclComm_t;
typedef struct oxcclStream* oxcclStream_t; /* a cudaStream_t on cuda; NULL on the host device */
typedef struct oxcclGraph* oxcclGraph_t;

#define OXCCL_UNIQUE_ID_BYTES 128
/* The job's id: where its root listens, its secret and its rank count, as text padded
 * with NUL bytes. Hand it only to the job's own ranks: it carries the secret. */
typedef struct {
  char internal[OXCCL_UNIQUE_ID_BYTES];
} oxcclUniqueId;

/* ncclResult_t's numbering. */
typedef enum {
  oxcclSuccess = 0,
  oxcclUnhandledCudaError = 1,
  oxcclSystemError = 2,
  oxcclInternalError = 3,
  oxcclInvalidArgument = 4,
  oxcclInvalidUsage = 5,
  oxcclRemoteError = 6,
  oxcclInProgress = 7,
  oxcclNumResults = 8
} oxcclResult_t;

/* ncclDataType_t's numbering (oxccl's 16-bit integers have no NCCL number). */
typedef enum {
  oxcclInt8 = 0,
  oxcclChar = 0,
  oxcclUint8 = 1,
  oxcclInt32 = 2,
  oxcclInt = 2,
  oxcclUint32 = 3,
  oxcclInt64 = 4,
  oxcclUint64 = 5,
  oxcclFloat16 = 6,
  oxcclHalf = 6,
  oxcclFloat32 = 7,
  oxcclFloat = 7,
  oxcclFloat64 = 8,
  oxcclDouble = 8,
  oxcclBfloat16 = 9,
  oxcclNumTypes = 10
} oxcclDataType_t;

/* ncclRedOp_t's numbering. oxcclAvg is refused (oxcclInvalidArgument): sum, then divide. */
typedef enum {
  oxcclSum = 0,
  oxcclProd = 1,
  oxcclMax = 2,
  oxcclMin = 3,
  oxcclAvg = 4,
  oxcclNumOps = 5
} oxcclRedOp_t;

/* A versioned communicator configuration for oxcclCommInitRankConfig. Start from
 * OXCCL_CONFIG_INITIALIZER (size, magic and version filled in, every field unset) and set
 * the fields you want; an unset field keeps the environment's value (OXCCL_*) or the
 * default. A struct whose size, magic or version this library does not know is refused. */
#define OXCCL_CONFIG_MAGIC 0x6f786363u /* "oxcc" */
#define OXCCL_CONFIG_VERSION 2u /* 2 added sharedBuffers; a version 1 struct is taken */
#define OXCCL_CONFIG_UNDEF_INT INT_MIN
#define OXCCL_CONFIG_UNDEF_PTR NULL
typedef struct oxcclConfig_v2 {
  size_t size;           /* sizeof(oxcclConfig_t) */
  unsigned int magic;    /* OXCCL_CONFIG_MAGIC */
  unsigned int version;  /* OXCCL_CONFIG_VERSION */
  int blocking;          /* 1 or 0; calls block either way (oxcclInProgress never comes) */
  int timeoutSeconds;    /* OXCCL_EXEC_TIMEOUT: 1 to 1000000000 */
  int bufferSizeMiB;     /* OXCCL_BUFFSIZE: each CCL buffer, MiB, 1 to 1048576 */
  int hostThreads;       /* OXCCL_HOST_THREADS: 0 (one per core) to 1024 */
  int zeroCopy;          /* OXCCL_ZERO_COPY: 1 or 0 */
  const char* algo;      /* OXCCL_ALGO, e.g. "all_reduce=ring;all_gather=mesh" */
  int sharedBuffers;     /* OXCCL_SHARED_BUFFERS: 1 or 0; 1: every rank of the job sets 1,
                            and each call's buffers come from oxcclMemAlloc */
} oxcclConfig_t;

#define OXCCL_CONFIG_INITIALIZER                                                     \
  {                                                                                  \
    sizeof(oxcclConfig_t), OXCCL_CONFIG_MAGIC, OXCCL_CONFIG_VERSION,                 \
        OXCCL_CONFIG_UNDEF_INT, OXCCL_CONFIG_UNDEF_INT, OXCCL_CONFIG_UNDEF_INT,      \
        OXCCL_CONFIG_UNDEF_INT, OXCCL_CONFIG_UNDEF_INT, OXCCL_CONFIG_UNDEF_PTR,      \
        OXCCL_CONFIG_UNDEF_INT                                                       \
  }

/* ---- Library and errors ---- */

/* OXCCL_VERSION_CODE of the library. */
oxcclResult_t oxcclGetVersion(int* version);
/* A static description of a result code. */
const char* oxcclGetErrorString(oxcclResult_t result);
/* This thread's last error message ("" when none). comm may be NULL: the message is the
 * calling thread's, whatever the communicator. Valid until this thread's next failing call. */
const char* oxcclGetLastError(oxcclComm_t comm);

/* ---- Communicators ---- */

/* Start a job's root in this process and return its id (call on one rank, hand the id to
 * every rank: MPI_Bcast, a file, a store). The root serves one job, for 10 minutes at most. */
oxcclResult_t oxcclGetUniqueId(oxcclUniqueId* uniqueId);
/* Join the job of commId as rank `rank` of nranks: collective over the job's ranks. On
 * cuda the rank runs on the calling thread's current CUDA device (cudaSetDevice before, as
 * with NCCL), unless OXCCL_CUDA_DEVICES places it; with none current, on the GPU of its
 * place among its host's ranks (LOCAL_RANK). */
oxcclResult_t oxcclCommInitRank(oxcclComm_t* comm, int nranks, oxcclUniqueId commId, int rank);
/* oxcclCommInitRank with a configuration (NULL: as oxcclCommInitRank). */
oxcclResult_t oxcclCommInitRankConfig(oxcclComm_t* comm, int nranks, oxcclUniqueId commId,
                                      int rank, oxcclConfig_t* config);
/* ndev ranks in this process, one communicator each; drive them from one thread with
 * oxcclGroupStart/oxcclGroupEnd, or one thread each. devlist: NULL, or ndev distinct
 * non-negative ints, rank i's CUDA device on cuda (ignored by the host device). */
oxcclResult_t oxcclCommInitAll(oxcclComm_t* comms, int ndev, const int* devlist);
/* Finish outstanding work (calls are blocking: there is none) and refuse every later call
 * but the queries and oxcclCommDestroy/oxcclCommAbort (oxcclInvalidUsage). */
oxcclResult_t oxcclCommFinalize(oxcclComm_t comm);
/* Free the communicator; the handle is invalid afterwards. */
oxcclResult_t oxcclCommDestroy(oxcclComm_t comm);
/* Stop the communicator (a call in flight on another thread ends with an error, the other
 * ranks are released naming this one), then free it. */
oxcclResult_t oxcclCommAbort(oxcclComm_t comm);
/* oxcclSuccess, or the code of the failure that broke the communicator (an abort, a rank
 * that failed or died), as this rank's calls met it. */
oxcclResult_t oxcclCommGetAsyncError(oxcclComm_t comm, oxcclResult_t* asyncError);
oxcclResult_t oxcclCommCount(const oxcclComm_t comm, int* count);
oxcclResult_t oxcclCommUserRank(const oxcclComm_t comm, int* rank);

/* ---- User memory ---- */

/* ncclMemAlloc, with the communicator whose peers map it: size zeroed bytes, page aligned,
 * at *ptr. With OXCCL_SHARED_BUFFERS=1 the ranks of a host map each other's allocations
 * and calls run zero-copy across processes, on such memory only; elsewhere it is heap
 * memory that serves any call. Collective: every rank allocates, in the same order (sizes
 * may differ), each from its own thread. On cuda: memory of the rank's GPU, not
 * collective. */
oxcclResult_t oxcclMemAlloc(oxcclComm_t comm, void** ptr, size_t size);
/* Free memory from oxcclMemAlloc that no call is using; any other pointer is
 * oxcclInvalidArgument. */
oxcclResult_t oxcclMemFree(void* ptr);

/* ---- Collectives (count in elements of datatype; NCCL's in-place forms) ---- */

/* In place: sendbuff == recvbuff. */
oxcclResult_t oxcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             oxcclDataType_t datatype, oxcclRedOp_t op, oxcclComm_t comm,
                             oxcclStream_t stream);
/* sendbuff is read on the root only. In place: sendbuff == recvbuff. */
oxcclResult_t oxcclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             oxcclDataType_t datatype, int root, oxcclComm_t comm,
                             oxcclStream_t stream);
/* recvbuff is written on the root only. In place: sendbuff == recvbuff. */
oxcclResult_t oxcclReduce(const void* sendbuff, void* recvbuff, size_t count,
                          oxcclDataType_t datatype, oxcclRedOp_t op, int root,
                          oxcclComm_t comm, oxcclStream_t stream);
/* recvbuff holds nranks * sendcount. In place: sendbuff == recvbuff + rank * sendcount. */
oxcclResult_t oxcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             oxcclDataType_t datatype, oxcclComm_t comm,
                             oxcclStream_t stream);
/* sendbuff holds nranks * recvcount. In place: recvbuff == sendbuff + rank * recvcount. */
oxcclResult_t oxcclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 oxcclDataType_t datatype, oxcclRedOp_t op,
                                 oxcclComm_t comm, oxcclStream_t stream);
/* Both hold nranks * count: block p of recvbuff is block rank of rank p's sendbuff.
 * No in-place form. */
oxcclResult_t oxcclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                            oxcclDataType_t datatype, oxcclComm_t comm,
                            oxcclStream_t stream);
/* The root's recvbuff (nranks * count) gets every rank's sendbuff (count); written on the
 * root only. In place: sendbuff == recvbuff + rank * count (on every rank). */
oxcclResult_t oxcclGather(const void* sendbuff, void* recvbuff, size_t count,
                          oxcclDataType_t datatype, int root, oxcclComm_t comm,
                          oxcclStream_t stream);
/* recvbuff (count) gets block rank of the root's sendbuff (nranks * count); read on the
 * root only. In place: recvbuff == sendbuff + rank * count (on every rank). */
oxcclResult_t oxcclScatter(const void* sendbuff, void* recvbuff, size_t count,
                           oxcclDataType_t datatype, int root, oxcclComm_t comm,
                           oxcclStream_t stream);
/* Block r of recvbuff (recvcounts[r] elements at displs[r]) gets rank r's sendbuff;
 * sendcount == recvcounts[rank]; every rank passes the same arrays (nranks entries).
 * In place: sendbuff == recvbuff + displs[rank]. */
oxcclResult_t oxcclAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                              const size_t* recvcounts, const size_t* displs,
                              oxcclDataType_t datatype, oxcclComm_t comm,
                              oxcclStream_t stream);
/* recvbuff (recvcount == sendcounts[rank]) gets op over block rank (sendcounts[rank] at
 * displs[rank]) of every rank's sendbuff; every rank passes the same arrays.
 * In place: recvbuff == sendbuff + displs[rank]. */
oxcclResult_t oxcclReduceScatterV(const void* sendbuff, const size_t* sendcounts,
                                  const size_t* displs, void* recvbuff, size_t recvcount,
                                  oxcclDataType_t datatype, oxcclRedOp_t op,
                                  oxcclComm_t comm, oxcclStream_t stream);
/* MPI_Alltoallv: sendcounts[p] elements at sdispls[p] go to rank p, recvcounts[p] at
 * rdispls[p] come from it (equal to rank p's sendcounts[rank]). No in-place form. */
oxcclResult_t oxcclAlltoAllV(const void* sendbuff, const size_t* sendcounts,
                             const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                             const size_t* rdispls, oxcclDataType_t datatype,
                             oxcclComm_t comm, oxcclStream_t stream);
/* The k-th send of rank a to rank b matches the k-th receive of b from a (same count and
 * type). The sends and receives of one group run as one call of the communicator: every
 * rank takes part (count 0 to take part with nothing). */
oxcclResult_t oxcclSend(const void* sendbuff, size_t count, oxcclDataType_t datatype,
                        int peer, oxcclComm_t comm, oxcclStream_t stream);
oxcclResult_t oxcclRecv(void* recvbuff, size_t count, oxcclDataType_t datatype, int peer,
                        oxcclComm_t comm, oxcclStream_t stream);
/* Returns once every rank entered it. */
oxcclResult_t oxcclBarrier(oxcclComm_t comm, oxcclStream_t stream);

/* ---- Groups ---- */

/* Calls between oxcclGroupStart and the matching oxcclGroupEnd (per thread; groups nest)
 * are checked and deferred; the outermost oxcclGroupEnd runs them all: the calls of
 * several communicators (the ranks of oxcclCommInitAll) together, a communicator's
 * sends and receives as one call. The errors of deferred calls come from oxcclGroupEnd.
 * A group in which a call was refused runs nothing and returns that call's error. */
oxcclResult_t oxcclGroupStart(void);
oxcclResult_t oxcclGroupEnd(void);

/* ---- Graphs: capture a sequence of collectives once, replay it many times ---- */

/* Later collective calls on comm are recorded, not run, until oxcclGraphCaptureEnd; each
 * step keeps its buffers, which must stay valid for every launch. */
oxcclResult_t oxcclGraphCaptureBegin(oxcclComm_t comm);
/* Compile the captured steps (collective: every rank ends its capture, each rank having
 * captured the same sequence) and return the graph. */
oxcclResult_t oxcclGraphCaptureEnd(oxcclComm_t comm, oxcclGraph_t* graph);
/* Run every captured step on its captured buffers (collective), on cuda after the work
 * queued on stream; on the host device stream must be NULL. */
oxcclResult_t oxcclGraphLaunch(oxcclGraph_t graph, oxcclStream_t stream);
oxcclResult_t oxcclGraphDestroy(oxcclGraph_t graph);

#ifdef __cplusplus
}
#endif

#endif /* OXCCL_H_ */
