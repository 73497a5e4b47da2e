/* Shared by the C tests of oxccl.h (see tests/c_abi.rs, which builds and runs them). */
#ifndef OXCCL_CAPI_TEST_COMMON_H
#define OXCCL_CAPI_TEST_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oxccl.h"

/* This process's rank and the job's rank count; failed checks so far. */
extern int g_rank;
extern int g_nranks;
extern int g_failures;

/* Elements per rank block in the tests. */
#define C 1000

/* Count a failure when cond is false. */
#define CHECK(cond, ...)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", g_rank, __FILE__,     \
              __LINE__, #cond);                                                   \
      fprintf(stderr, __VA_ARGS__);                                               \
      fputc('\n', stderr);                                                        \
      g_failures++;                                                               \
    }                                                                             \
  } while (0)

/* The call must succeed; the test stops otherwise (the ranks would fall out of step). */
#define OK(call)                                                                  \
  do {                                                                            \
    oxcclResult_t ok_r_ = (call);                                                 \
    if (ok_r_ != oxcclSuccess) {                                                  \
      fprintf(stderr, "rank %d: %s:%d: %s returned %d: %s\n", g_rank, __FILE__,   \
              __LINE__, #call, (int)ok_r_, oxcclGetLastError(NULL));              \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* The call must fail with `code`, and oxcclGetLastError must contain `needle`. */
#define EXPECT(code, needle, call)                                                \
  do {                                                                            \
    oxcclResult_t ex_r_ = (call);                                                 \
    const char* ex_m_ = oxcclGetLastError(NULL);                                  \
    if (ex_r_ != (code) || strstr(ex_m_, (needle)) == NULL) {                     \
      fprintf(stderr,                                                             \
              "rank %d: %s:%d: %s returned %d (last error: %s); expected %d with " \
              "\"%s\"\n",                                                         \
              g_rank, __FILE__, __LINE__, #call, (int)ex_r_, ex_m_, (int)(code),  \
              (needle));                                                          \
      g_failures++;                                                               \
    }                                                                             \
  } while (0)

#define INVALID(needle, call) EXPECT(oxcclInvalidArgument, needle, call)
#define USAGE(needle, call) EXPECT(oxcclInvalidUsage, needle, call)

/* Handles no oxccl call ever returned, and a stream the host device cannot have. */
#define BOGUS_COMM ((oxcclComm_t)(uintptr_t)0x1230)
#define SOME_STREAM ((oxcclStream_t)(uintptr_t)0x40)

/* A float every rank can predict: small integers, exact in sums. */
static inline float val(int rank, size_t i) { return (float)(rank + 1) + (float)(i % 7); }

void* xcalloc(size_t n, size_t size);

/* The parts of the test, in the order main runs them. */
void test_collectives(oxcclComm_t comm);
void test_groups(oxcclComm_t comm);
void test_errors(oxcclComm_t comm);
void test_graphs(oxcclComm_t comm);
void test_in_process(oxcclComm_t comm);

#endif
