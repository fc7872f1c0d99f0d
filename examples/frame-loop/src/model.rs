//! The model: an edge-and-blur filter built from the program vocabulary's compute ops, and its
//! CPU reference.
//!
//! On an f32 `[1, 3, h, w]` image `x` in `[0, 1]`, with 3x3 windows, stride 1, padding 1:
//! `y = clamp(EDGE * (max3(x) - min3(x)) + BLUR * mean3(x), 0, 1)`: the morphological gradient
//! (dilation minus erosion, `min3(x) = -max3(-x)`) lights edges up in their own colour over a
//! dimmed blur of the scene. `mean3` divides by the window clipped to the image
//! (`count_include_pad = false`).

use vk_core::{DType, TensorSpec};
use vkdelegate::program::{ComputeStep, DeviceChoice, ProgramBuilder, StepKind, StepSpec};

/// Weight of the edges.
pub const EDGE: f32 = 2.5;
/// Weight of the blur.
pub const BLUR: f32 = 0.3;
/// Channels of the model's tensors (alpha is not part of them).
pub const CHANNELS: usize = 3;
/// The program's input.
pub const INPUT: &str = "x";
/// The program's output.
pub const OUTPUT: &str = "y";

/// The tensor shape for a `width` x `height` image.
pub fn shape(width: u32, height: u32) -> Vec<usize> {
    vec![1, CHANNELS, height as usize, width as usize]
}

fn step(name: &str, op: ComputeStep, inputs: &[&str], declared: Option<&TensorSpec>) -> StepSpec {
    let op = match declared {
        Some(spec) => op.declared_input(spec.clone()),
        None => op,
    };
    StepSpec {
        name: name.into(),
        kind: StepKind::Compute(op),
        inputs: inputs.iter().map(|s| (*s).into()).collect(),
        outputs: vec![name.into()],
    }
}

/// A 3x3 window, stride 1, padding 1; averages divide by the window clipped to the image.
fn pool(op: &str) -> ComputeStep {
    let step = ComputeStep::new(op)
        .with("kernel", 3)
        .with("stride", 1)
        .with("padding", 1);
    match op {
        "avg_pool2d" => step.with("count_include_pad", false),
        _ => step,
    }
}

/// The program for a `width` x `height` image on `device`, input [`INPUT`], output
/// [`OUTPUT`]; bindings are the caller's.
pub fn program(width: u32, height: u32, device: DeviceChoice) -> ProgramBuilder {
    let x = TensorSpec::new(INPUT, DType::F32, shape(width, height));
    let scale = |value: f32| ComputeStep::new("mul_scalar").with("value", f64::from(value));
    let add = || ComputeStep::new("add");
    let steps = [
        step("negated", scale(-1.0), &[INPUT], Some(&x)),
        step("dilated", pool("max_pool2d"), &[INPUT], Some(&x)),
        step("blurred", pool("avg_pool2d"), &[INPUT], Some(&x)),
        step("neg_eroded", pool("max_pool2d"), &["negated"], None),
        step("gradient", add(), &["dilated", "neg_eroded"], None),
        step("edges", scale(EDGE), &["gradient"], None),
        step("dimmed", scale(BLUR), &["blurred"], None),
        step("sum", add(), &["edges", "dimmed"], None),
        step(
            OUTPUT,
            ComputeStep::new("clamp").with("min", 0.0).with("max", 1.0),
            &["sum"],
            None,
        ),
    ];
    steps
        .into_iter()
        .fold(ProgramBuilder::new(), ProgramBuilder::step)
        .outputs(&[OUTPUT])
        .device(device)
}

/// An RGBA8 image (`width * height * 4` bytes) as the model's input tensor, alpha dropped:
/// what the engine's `image_to_tensor` pass computes.
pub fn to_tensor(rgba: &[u8], width: u32, height: u32) -> Vec<f32> {
    let plane = width as usize * height as usize;
    let mut out = vec![0.0; CHANNELS * plane];
    for (i, px) in rgba.chunks_exact(4).take(plane).enumerate() {
        for c in 0..CHANNELS {
            out[c * plane + i] = f32::from(px[c]) / 255.0;
        }
    }
    out
}

/// The model's output tensor as an RGBA8 image, clamped, rounded, alpha 255: what the
/// engine's `tensor_to_image` pass writes.
pub fn to_rgba(tensor: &[f32], width: u32, height: u32) -> Vec<u8> {
    let plane = width as usize * height as usize;
    let mut out = vec![255u8; 4 * plane];
    for i in 0..plane {
        for c in 0..CHANNELS {
            let v = tensor.get(c * plane + i).copied().unwrap_or(0.0);
            out[4 * i + c] = (v.clamp(0.0, 1.0) * 255.0).round() as u8;
        }
    }
    out
}

/// Min, max and mean of the 3x3 window around `(x, y)` of one plane, clipped to the image.
fn window(plane: &[f32], width: usize, height: usize, x: usize, y: usize) -> (f32, f32, f32) {
    let (mut lo, mut hi, mut sum, mut n) = (f32::INFINITY, f32::NEG_INFINITY, 0.0f32, 0u32);
    for yy in y.saturating_sub(1)..(y + 2).min(height) {
        for xx in x.saturating_sub(1)..(x + 2).min(width) {
            let v = plane[yy * width + xx];
            lo = lo.min(v);
            hi = hi.max(v);
            sum += v;
            n += 1;
        }
    }
    (lo, hi, sum / n as f32)
}

/// The model on the CPU: its output tensor for input tensor `x` of a `width` x `height` image.
pub fn reference_tensor(x: &[f32], width: u32, height: u32) -> Vec<f32> {
    let (w, h) = (width as usize, height as usize);
    let plane = w * h;
    let mut y = vec![0.0; x.len()];
    for c in 0..CHANNELS {
        let p = &x[c * plane..(c + 1) * plane];
        for yy in 0..h {
            for xx in 0..w {
                let (lo, hi, mean) = window(p, w, h, xx, yy);
                let v = (hi + -lo) * EDGE + mean * BLUR;
                y[c * plane + yy * w + xx] = v.clamp(0.0, 1.0);
            }
        }
    }
    y
}

/// The model on the CPU, image to image: what the frame loop presents for a rendered `rgba`.
pub fn reference(rgba: &[u8], width: u32, height: u32) -> Vec<u8> {
    let x = to_tensor(rgba, width, height);
    to_rgba(&reference_tensor(&x, width, height), width, height)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_image_is_dimmed_and_an_edge_lights_up() {
        // 4x1: left half black, right half white (grey levels in every channel).
        let px = |v: u8| [v, v, v, 255];
        let rgba: Vec<u8> = [0u8, 0, 255, 255].iter().flat_map(|&v| px(v)).collect();
        let out = reference(&rgba, 4, 1);
        assert_eq!(out[0], 0, "flat black stays black");
        assert_eq!(out[4], 255, "the edge saturates");
        assert_eq!(
            out[12],
            (BLUR * 255.0).round() as u8,
            "flat white is dimmed"
        );
        assert!(out.chunks_exact(4).all(|p| p[3] == 255));
    }

    #[test]
    fn tensors_round_trip() {
        let rgba: Vec<u8> = (0..4 * 6).map(|i| (i * 10) as u8).collect();
        let back = to_rgba(&to_tensor(&rgba, 3, 2), 3, 2);
        for (a, b) in rgba.chunks_exact(4).zip(back.chunks_exact(4)) {
            assert_eq!(&a[..3], &b[..3]);
            assert_eq!(b[3], 255);
        }
    }
}
