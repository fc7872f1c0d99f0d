// Element types of the op library's shaders, which compile once per precision: plain for
// f32 tensors and, with `// variant: f16 -DDTYPE_F16`, for f16 tensors. Tensors are stored as
// T (a scalar), T2, T4 (vectors) and WORD (an element moved without arithmetic); arithmetic
// runs in fp32: loads widen to float / vec4, stores narrow, and accumulators are ACC / ACC4
// (fp32 in both variants). f16vec4 is 8 bytes; buffers stay padded to 16, which covers both.
#ifdef DTYPE_F16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define T float16_t
#define T2 f16vec2
#define T4 f16vec4
#define WORD float16_t
#else
#define T float
#define T2 vec2
#define T4 vec4
#define WORD uint
#endif
#define ACC float
#define ACC4 vec4
