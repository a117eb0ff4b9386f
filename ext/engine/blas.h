/*
** blas.h — the one BLAS routine the engine calls, resolved at run time.
**
** OpenBLAS is dlopen()ed by bf_blas_init() (see blas.c) so that the CPU core
** type can be chosen before OpenBLAS initialises; on a machine without it,
** bf_sgemm runs blas.c's plain C loops instead (never required).  Call sites
** use bf_sgemm, which has cblas_sgemm's meaning for row-major matrices.
*/
#ifndef BERTFILL_BLAS_H
#define BERTFILL_BLAS_H

/* C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major.
** transA / transB: 0 = as stored, 1 = transposed. */
void bf_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

#endif
