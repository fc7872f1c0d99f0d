#version 450
#extension GL_GOOGLE_include_directive : require
// tensor to image for images of storage format rgba32f (see tensor_to_image.glsl).
#define FORMAT rgba32f
// variant: f16 -DTENSOR_F16
#include "tensor_to_image.glsl"
