#version 450
// kernel: GemvT
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// GEMM of one to four rows by a matrix stored transposed, as a linear layer's weights are
// ([N][K]): C[z][r][j] = sum_k A[z][r][k] * B[z][j][k] (+ bias[j]), r < ROWS. Such products
// (a language model's decode step) are bound by reading B once. K, A's and B's row and batch
// strides are multiples of 4 (both read as vec4s); C is row-major with any strides.
//
// A work group is 64 lanes by 4 columns: column j = 4 * gl_WorkGroupID.x + y is the dot
// product of B's row j with the rows of A, lane x reading the vec4s x, x + 64, ... of it (the
// 64 lanes of a column read 1 KiB of B contiguously), four in flight; the lanes' sums are
// then added through shared memory.
//
// With GLU, each column is the gated product of two such matrices, B (the gate) and B2 (the
// up): C = silu(A B^T) * (A B2^T), as a language model's MLP computes it (made by the graph's
// fusion pass; no bias). With NORM, each row of A is first RMS-normalised,
// A[r][k] * norm_w[k] / sqrt(mean_k(A[r]^2) + eps), as the norm before a product computes it
// (another fusion pass): the lanes sum the squares of the A they load, and the sums are scaled
// at the end.
// The body is gemv_t.glsl's.
// variant: f16 -DDTYPE_F16
#include "gemv_t.glsl"
