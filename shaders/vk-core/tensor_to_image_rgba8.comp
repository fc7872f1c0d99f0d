#version 450
#extension GL_GOOGLE_include_directive : require
// tensor to image for images of storage format rgba8 (see tensor_to_image.glsl).
#define FORMAT rgba8
#define UNORM_LEVELS 255.0
// variant: f16 -DTENSOR_F16
#include "tensor_to_image.glsl"
