// layer_norm over the last `d` elements of each of `rows` rows: one work group per row, mean
// then variance (two passes over the row, biased variance as PyTorch), then the affine part.
// With subgroups (SUBGROUP) and SG_ROWS, one subgroup per row instead: many short rows (a
// ConvNeXt's or Swin's 3136 pixels of 96 channels) without the work group's barriers or its
// idle invocations.
#include "dtype.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint HAS_WEIGHT = 0;
layout(constant_id = 1) const uint HAS_BIAS = 0;
// Short rows (PER_THREAD = 1): one thread per row, grid-stride, instead of a work group.
layout(constant_id = 2) const uint PER_THREAD = 0;
// RMS norm (`rms_norm`): no mean is subtracted; the variance is the mean square.
layout(constant_id = 3) const uint RMS = 0;
// A subgroup per row (SUBGROUP only; contiguous rows).
layout(constant_id = 4) const uint SG_ROWS = 0;

layout(std430, set = 0, binding = 0) readonly buffer X { T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { T w[]; };
layout(std430, set = 0, binding = 2) readonly buffer B { T b[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Y { T y[]; };

layout(push_constant) uniform Params {
    uint rows;
    uint d;
    float eps;
    // 0: rows are contiguous. Else x is channels-first, [n, d, plane], and row r reads the
    // d channels of pixel r % plane of image r / plane (y stays [rows, d]).
    uint plane;
} pc;

// Where element j of row r is in x.
uint x_index(uint r, uint j) {
    if (pc.plane == 0) {
        return r * pc.d + j;
    }
    uint img = r / pc.plane;
    return (img * pc.d + j) * pc.plane + (r - img * pc.plane);
}

#include "block_sum.glsl"

#if SUBGROUP
// The rows of contiguous `d` elements, a subgroup each, grid-stride over the work groups'
// subgroups.
void rows_by_subgroup() {
    uint lane = gl_SubgroupInvocationID;
    uint width = gl_SubgroupSize;
    uint step = gl_NumWorkGroups.x * gl_NumSubgroups;
    for (uint row = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; row < pc.rows;
         row += step) {
        uint base = row * pc.d;
        ACC acc = 0.0;
        for (uint j = lane; RMS == 0 && j < pc.d; j += width) {
            acc += float(x[base + j]);
        }
        float mean = RMS == 1 ? 0.0 : subgroupAdd(acc) / float(pc.d);
        acc = 0.0;
        for (uint j = lane; j < pc.d; j += width) {
            float c = float(x[base + j]) - mean;
            acc += c * c;
        }
        float rstd = inversesqrt(subgroupAdd(acc) / float(pc.d) + pc.eps);
        for (uint j = lane; j < pc.d; j += width) {
            float v = (float(x[base + j]) - mean) * rstd;
            if (HAS_WEIGHT == 1) v *= float(w[j]);
            if (HAS_BIAS == 1) v += float(b[j]);
            y[base + j] = T(v);
        }
    }
}
#endif

void main() {
#if SUBGROUP
    if (SG_ROWS == 1) {
        rows_by_subgroup();
        return;
    }
#endif
    if (PER_THREAD == 1) {
        uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
        for (uint row = gl_GlobalInvocationID.x; row < pc.rows; row += stride) {
            uint base = row * pc.d;
            ACC acc = 0.0;
            for (uint j = 0; RMS == 0 && j < pc.d; ++j) {
                acc += float(x[x_index(row, j)]);
            }
            float mean = acc / float(pc.d);
            acc = 0.0;
            for (uint j = 0; j < pc.d; ++j) {
                float c = float(x[x_index(row, j)]) - mean;
                acc += c * c;
            }
            float rstd = inversesqrt(acc / float(pc.d) + pc.eps);
            for (uint j = 0; j < pc.d; ++j) {
                float v = (float(x[x_index(row, j)]) - mean) * rstd;
                if (HAS_WEIGHT == 1) v *= float(w[j]);
                if (HAS_BIAS == 1) v += float(b[j]);
                y[base + j] = T(v);
            }
        }
        return;
    }
    uint t = gl_LocalInvocationID.x;
    for (uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; row < pc.rows;
         row += gl_NumWorkGroups.x * gl_NumWorkGroups.y) {
        uint base = row * pc.d;
        ACC acc = 0.0;
        for (uint j = t; RMS == 0 && j < pc.d; j += 256) {
            acc += float(x[x_index(row, j)]);
        }
        float mean = RMS == 1 ? 0.0 : block_sum(acc) / float(pc.d);
        acc = 0.0;
        for (uint j = t; j < pc.d; j += 256) {
            float c = float(x[x_index(row, j)]) - mean;
            acc += c * c;
        }
        float rstd = inversesqrt(block_sum(acc) / float(pc.d) + pc.eps);
        for (uint j = t; j < pc.d; j += 256) {
            float v = (float(x[x_index(row, j)]) - mean) * rstd;
            if (HAS_WEIGHT == 1) v *= float(w[j]);
            if (HAS_BIAS == 1) v += float(b[j]);
            y[base + j] = T(v);
        }
    }
}
