#version 450
// kernel: GemvT
// kernel: GemvT8 variant=rows8
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
// GEMM of one to eight rows (five to eight: the rows8 variant) by a matrix stored transposed, as a linear layer's weights are
// ([N][K]): C[z][r][j] = sum_k A[z][r][k] * B[z][j][k] (+ bias[j]), r < ROWS. Such products
// (a language model's decode step) are bound by reading B once. K, A's and B's row and batch
// strides are multiples of 4 (both read as vec4s); C is row-major with any strides.
//
// A work group is LANES lanes (64, or 32 or 128 where the lowering asks) by 4 columns:
// column j = 4 * gl_WorkGroupID.x + y is the dot product of B's row j with the rows of A,
// lane x reading the vec4s x, x + LANES, ... of it (a column's lanes read B contiguously),
// 256 / LANES in flight; the lanes' sums are then added through shared memory.
//
// With GLU, each column is the gated product of two such matrices, B (the gate) and B2 (the
// up): C = silu(A B^T) * (A B2^T), as a language model's MLP computes it (made by the graph's
// fusion pass; no bias). With NORM, each row of A is first RMS-normalised,
// A[r][k] * norm_w[k] / sqrt(mean_k(A[r]^2) + eps), as the norm before a product computes it
// (another fusion pass): the lanes sum the squares of the A they load, and the sums are scaled
// at the end.
//
// CACHE, fused by the graph's passes in place of a KV cache write: with cache_rows, the rows
// of C are stored into a KV cache at a position, keys rotated on the way (cache_store.glsl,
// shared with gemv_q4.comp). A pair's two columns are in one work group.
//
// WIDE (f16, where K and B's strides are multiples of 8): B is read in 16-byte words of 8
// elements, not vec4s of 8 bytes, so that a lane has twice the bytes in flight per load.
// The body is gemv_t.glsl's.
// variant: f16 -DDTYPE_F16
// The rows8 variants: products of five to eight rows (ROWS8: room for eight rows' sums).
// variant: rows8 -DROWS8
// variant: rows8_f16 -DROWS8 -DDTYPE_F16
#include "gemv_t.glsl"
