#version 450
#extension GL_GOOGLE_include_directive : require
// image to tensor for images of storage format rgba8 (see image_to_tensor.glsl).
#define FORMAT rgba8
// variant: f16 -DTENSOR_F16
#include "image_to_tensor.glsl"
