//! GPU tests of the image conversion kernels: real images (37x23, so partial work groups at
//! both edges) of every supported format, read into NCHW and NHWC tensors and written back
//! through each colour map, against CPU references; rebinding; the device-side checks.
//! Validation (core and synchronization) is on; every test ends by asserting zero errors.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use vk_core::testing::{self, TestImage, assert_no_validation_errors, f16_bits, f16_value};
use vk_core::{
    Buffer, ColourMap, DType, Device, ImageConversion, ImageError, ImageProblem, ImageToTensor,
    MemoryLocation, Requirements, Submission, TensorLayout, TensorSpec, TensorToImage, vk,
};

const W: u32 = 37;
const H: u32 = 23;
const FORMATS: [vk::Format; 4] = vk_core::image_io::FORMATS;

fn device(test: &str) -> Option<(vk_core::Instance, Device)> {
    testing::device(test, &Requirements::new("vk-core image test"))
}

/// No validation error, and no warning either: a storage image whose view does not match the
/// kernel's format qualifier is a warning (undefined values).
fn assert_clean(instance: &vk_core::Instance) {
    assert_no_validation_errors(instance);
    assert_eq!(
        instance.validation().warning_count(),
        0,
        "validation warnings"
    );
}

/// The test pattern's texel (RGBA, in [0, 1]; exact in every format).
fn texel(x: u32, y: u32) -> [f32; 4] {
    let b = |c: u32| ((x * 7 + y * 13 + c * 61) % 256) as f32 / 255.0;
    [b(0), b(1), b(2), b(3)]
}

/// `rgba` as the format stores it.
fn encode(format: vk::Format, rgba: [f32; 4]) -> Vec<u8> {
    match format {
        vk::Format::R8G8B8A8_UNORM => rgba.map(|v| (v * 255.0).round() as u8).to_vec(),
        vk::Format::B8G8R8A8_UNORM => [rgba[2], rgba[1], rgba[0], rgba[3]]
            .map(|v| (v * 255.0).round() as u8)
            .to_vec(),
        vk::Format::R16G16B16A16_SFLOAT => rgba
            .iter()
            .flat_map(|v| f16_bits(*v).to_le_bytes())
            .collect(),
        _ => rgba.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// The format's bytes of one texel back as RGBA.
fn decode(format: vk::Format, b: &[u8]) -> [f32; 4] {
    match format {
        vk::Format::R8G8B8A8_UNORM => [0, 1, 2, 3].map(|i| f32::from(b[i]) / 255.0),
        vk::Format::B8G8R8A8_UNORM => [2, 1, 0, 3].map(|i| f32::from(b[i]) / 255.0),
        vk::Format::R16G16B16A16_SFLOAT => {
            [0, 1, 2, 3].map(|i| f16_value(u16::from_le_bytes([b[2 * i], b[2 * i + 1]])))
        }
        _ => [0, 1, 2, 3].map(|i| f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())),
    }
}

fn texel_bytes(format: vk::Format) -> usize {
    match format {
        vk::Format::R16G16B16A16_SFLOAT => 8,
        vk::Format::R32G32B32A32_SFLOAT => 16,
        _ => 4,
    }
}

fn pattern(format: vk::Format) -> Vec<u8> {
    (0..H)
        .flat_map(|y| (0..W).flat_map(move |x| encode(format, texel(x, y))))
        .collect()
}

fn image(device: &Device, format: vk::Format) -> TestImage {
    TestImage::new(device, format, W, H, vk::ImageUsageFlags::STORAGE)
}

fn shape(layout: TensorLayout, c: usize) -> Vec<usize> {
    let (h, w) = (H as usize, W as usize);
    match layout {
        TensorLayout::Nchw => vec![1, c, h, w],
        TensorLayout::Nhwc => vec![1, h, w, c],
    }
}

fn index(layout: TensorLayout, c: usize, ch: usize, x: u32, y: u32) -> usize {
    let pixel = (y * W + x) as usize;
    match layout {
        TensorLayout::Nchw => ch * (W * H) as usize + pixel,
        TensorLayout::Nhwc => pixel * c + ch,
    }
}

fn tensor_buffer(device: &Device, floats: usize) -> Buffer {
    let usage = vk::BufferUsageFlags::STORAGE_BUFFER;
    Buffer::new(
        device,
        floats as u64 * 4,
        MemoryLocation::Host,
        usage,
        "tensor",
    )
    .unwrap()
}

fn read_f32s(b: &Buffer, n: usize) -> Vec<f32> {
    let mut raw = vec![0u8; n * 4];
    b.read(0, &mut raw).unwrap();
    raw.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn write_f32s(b: &mut Buffer, values: &[f32]) {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    b.write(0, &raw).unwrap();
}

/// Records `conversion` alone, submits and waits.
fn run(device: &Device, conversion: &ImageConversion) {
    let mut s = Submission::new(device, 1, "image test").unwrap();
    let cmd = s.begin(0).unwrap();
    // SAFETY: recording into the submission's own command buffer; the conversion, its image
    // and tensor outlive the wait below; the image is in GENERAL (TestImage).
    unsafe {
        vk_core::barrier::memory_barrier(
            device,
            cmd,
            vk_core::Access::HOST_WRITE,
            vk_core::Access::ANY,
        );
        conversion.record(cmd);
        vk_core::barrier::host_read_barrier(device, cmd);
    }
    s.end(0).unwrap();
    // SAFETY: executable; no semaphores.
    unsafe { s.submit(0, &[], &[]) }.unwrap();
    s.wait().unwrap();
}

fn to_tensor(
    device: &Device,
    img: &TestImage,
    conv: &ImageToTensor,
    c: usize,
) -> (ImageConversion, Buffer) {
    let spec = TensorSpec::new("t", DType::F32, shape(conv.layout, c));
    let buffer = tensor_buffer(device, c * (W * H) as usize);
    // SAFETY: image and buffer are live and outlive the conversion's submissions.
    let conversion = unsafe {
        ImageConversion::image_to_tensor(device, img.app(), &spec, buffer.slice(None), conv)
    }
    .unwrap();
    (conversion, buffer)
}

#[test]
fn images_of_every_format_are_read_into_nchw_and_nhwc_tensors() {
    let Some((instance, device)) = device("images_are_read_into_tensors") else {
        return;
    };
    for format in FORMATS {
        let img = image(&device, format);
        img.write(&pattern(format));
        for (layout, c) in [(TensorLayout::Nchw, 3), (TensorLayout::Nhwc, 4)] {
            let conv = ImageToTensor {
                layout,
                scale: [2.0, 0.5, -1.0, 4.0],
                mean: [0.5, 0.25, 0.0, 1.0],
            };
            let (conversion, buffer) = to_tensor(&device, &img, &conv, c);
            run(&device, &conversion);
            let got = read_f32s(&buffer, c * (W * H) as usize);
            for y in 0..H {
                for x in 0..W {
                    // The texel as the format holds it (f16 rounds).
                    let t = decode(format, &encode(format, texel(x, y)));
                    for ch in 0..c {
                        let want = (t[ch] - conv.mean[ch]) * conv.scale[ch];
                        let v = got[index(layout, c, ch, x, y)];
                        assert!(
                            (v - want).abs() < 1e-5,
                            "{format:?} {layout:?} ({x},{y}) c{ch}: {v} != {want}"
                        );
                    }
                }
            }
        }
    }
    assert_clean(&instance);
}

/// What the heat palette makes of `v` (as the shader does).
fn heat(v: f32) -> [f32; 4] {
    let x = v.clamp(0.0, 1.0);
    let ch = |k: f32| (1.5 - (4.0 * x - k).abs()).clamp(0.0, 1.0);
    [ch(3.0), ch(2.0), ch(1.0), 1.0]
}

fn tolerance(format: vk::Format) -> f32 {
    match format {
        vk::Format::R8G8B8A8_UNORM | vk::Format::B8G8R8A8_UNORM => 0.5 / 255.0 + 1e-4,
        vk::Format::R16G16B16A16_SFLOAT => 1e-3,
        _ => 1e-6,
    }
}

/// Writes `values` (a tensor of `c` channels in `conv.layout`) into a new image of `format`
/// and compares every texel with `want(x, y)`.
fn check_to_image(
    device: &Device,
    format: vk::Format,
    conv: &TensorToImage,
    c: usize,
    values: &[f32],
    want: impl Fn(u32, u32) -> [f32; 4],
) {
    let img = image(device, format);
    let spec = TensorSpec::new("t", DType::F32, shape(conv.layout, c));
    let mut buffer = tensor_buffer(device, values.len());
    write_f32s(&mut buffer, values);
    // SAFETY: image and buffer are live and outlive the conversion's submissions.
    let conversion = unsafe {
        ImageConversion::tensor_to_image(device, &spec, buffer.slice(None), img.app(), conv)
    }
    .unwrap();
    run(device, &conversion);
    let bytes = img.read();
    let n = texel_bytes(format);
    for y in 0..H {
        for x in 0..W {
            let at = ((y * W + x) as usize) * n;
            let got = decode(format, &bytes[at..at + n]);
            let want = want(x, y);
            for ch in 0..4 {
                assert!(
                    (got[ch] - want[ch]).abs() <= tolerance(format),
                    "{format:?} {:?} ({x},{y}) c{ch}: {got:?} != {want:?}",
                    conv.colour_map
                );
            }
        }
    }
}

/// A tensor of `c` channels whose value at (x, y, ch) is `f(x, y, ch)`.
fn tensor(layout: TensorLayout, c: usize, f: impl Fn(u32, u32, usize) -> f32) -> Vec<f32> {
    let mut v = vec![0.0; c * (W * H) as usize];
    for y in 0..H {
        for x in 0..W {
            for ch in 0..c {
                v[index(layout, c, ch, x, y)] = f(x, y, ch);
            }
        }
    }
    v
}

fn value(x: u32, y: u32, ch: usize) -> f32 {
    ((x * 3 + y * 5 + ch as u32 * 11) % 40) as f32 / 20.0 - 0.5
}

#[test]
fn tensors_are_written_into_images_through_each_colour_map() {
    let Some((instance, device)) = device("tensors_are_written_into_images") else {
        return;
    };
    let (scale, bias) = (0.8, 0.1);
    let mapped = |v: f32| (v * scale + bias).clamp(0.0, 1.0);
    for format in FORMATS {
        for (layout, c) in [
            (TensorLayout::Nchw, 1),
            (TensorLayout::Nhwc, 3),
            (TensorLayout::Nchw, 4),
        ] {
            let conv = TensorToImage {
                layout,
                colour_map: ColourMap::Channels,
                scale,
                bias,
            };
            let values = tensor(layout, c, value);
            check_to_image(&device, format, &conv, c, &values, |x, y| {
                let v = |ch| mapped(value(x, y, ch));
                match c {
                    1 => [v(0), v(0), v(0), 1.0],
                    3 => [v(0), v(1), v(2), 1.0],
                    _ => [v(0), v(1), v(2), v(3)],
                }
            });
        }
        let conv = TensorToImage {
            colour_map: ColourMap::Heat,
            ..TensorToImage::default()
        };
        let values = tensor(TensorLayout::Nchw, 1, value);
        check_to_image(&device, format, &conv, 1, &values, |x, y| {
            heat(value(x, y, 0))
        });
        let palette: Vec<[f32; 4]> = (0..5)
            .map(|k| [k as f32 / 4.0, 1.0 - k as f32 / 4.0, 0.5, 1.0])
            .collect();
        let conv = TensorToImage {
            layout: TensorLayout::Nhwc,
            colour_map: ColourMap::Classes(palette.clone()),
            ..TensorToImage::default()
        };
        let best = |x: u32, y: u32| ((x + 2 * y) % 5) as usize;
        let values = tensor(TensorLayout::Nhwc, 5, |x, y, ch| {
            if ch == best(x, y) {
                3.0
            } else {
                value(x, y, ch)
            }
        });
        check_to_image(&device, format, &conv, 5, &values, |x, y| {
            palette[best(x, y)]
        });
    }
    assert_clean(&instance);
}

/// 8-bit images get the level nearest to each value, on every driver: Vulkan lets a UNORM
/// store write either of the two nearest levels, so the kernel rounds itself (halves up).
#[test]
fn eight_bit_images_get_the_nearest_level_on_every_driver() {
    let Some((instance, device)) = device("eight_bit_images_get_the_nearest_level") else {
        return;
    };
    // Per texel a level k and a fraction of a level above it, from 0.01 to 0.97 (never a half).
    let level = |x: u32, y: u32| (x * 7 + y * 11) % 255;
    let fraction =
        |x: u32, y: u32, ch: usize| 0.01 + ((x + 3 * y + ch as u32 * 5) % 49) as f32 * 0.02;
    let values = tensor(TensorLayout::Nhwc, 4, |x, y, ch| {
        (level(x, y) as f32 + fraction(x, y, ch)) / 255.0
    });
    let conv = TensorToImage {
        layout: TensorLayout::Nhwc,
        colour_map: ColourMap::Channels,
        scale: 1.0,
        bias: 0.0,
    };
    for format in [vk::Format::R8G8B8A8_UNORM, vk::Format::B8G8R8A8_UNORM] {
        let img = image(&device, format);
        let spec = TensorSpec::new("t", DType::F32, shape(conv.layout, 4));
        let mut buffer = tensor_buffer(&device, values.len());
        write_f32s(&mut buffer, &values);
        // SAFETY: image and buffer are live and outlive the conversion's submissions.
        let conversion = unsafe {
            ImageConversion::tensor_to_image(&device, &spec, buffer.slice(None), img.app(), &conv)
        }
        .unwrap();
        run(&device, &conversion);
        let bytes = img.read();
        for y in 0..H {
            for x in 0..W {
                let at = ((y * W + x) * 4) as usize;
                let got = decode(format, &bytes[at..at + 4]);
                for (ch, g) in got.iter().enumerate() {
                    let f = fraction(x, y, ch);
                    let want = level(x, y) + u32::from(f > 0.5);
                    assert_eq!(
                        (g * 255.0).round() as u32,
                        want,
                        "{format:?} ({x},{y}) c{ch}: level {} + {f}",
                        level(x, y)
                    );
                }
            }
        }
    }
    assert_clean(&instance);
}

#[test]
fn set_image_rebinds_another_image_of_the_same_class_and_extent() {
    let Some((instance, device)) = device("set_image_rebinds") else {
        return;
    };
    let first = image(&device, vk::Format::R8G8B8A8_UNORM);
    first.write(&vec![0u8; first.bytes() as usize]);
    let second = image(&device, vk::Format::B8G8R8A8_UNORM);
    second.write(&pattern(vk::Format::B8G8R8A8_UNORM));
    let conv = ImageToTensor::default();
    let (mut conversion, buffer) = to_tensor(&device, &first, &conv, 4);
    run(&device, &conversion);
    assert!(read_f32s(&buffer, 4).iter().all(|v| *v == 0.0));
    // SAFETY: `second` is live; nothing is pending (run waited).
    unsafe { conversion.set_image(second.app()) }.unwrap();
    assert_eq!(conversion.image(), second.app());
    run(&device, &conversion);
    let got = read_f32s(&buffer, 4 * (W * H) as usize);
    let (x, y) = (W - 1, H - 1);
    for ch in 0..4 {
        let v = got[index(TensorLayout::Nchw, 4, ch, x, y)];
        assert!((v - texel(x, y)[ch]).abs() < 1e-6, "c{ch}: {v}");
    }
    let float = image(&device, vk::Format::R32G32B32A32_SFLOAT);
    // SAFETY: as above.
    let e = unsafe { conversion.set_image(float.app()) }.unwrap_err();
    assert!(
        matches!(e, ImageError::Problem(ImageProblem::FormatChanged { .. })),
        "{e}"
    );
    let small = TestImage::new(
        &device,
        vk::Format::R8G8B8A8_UNORM,
        W - 1,
        H,
        vk::ImageUsageFlags::STORAGE,
    );
    // SAFETY: as above.
    let e = unsafe { conversion.set_image(small.app()) }.unwrap_err();
    assert!(
        matches!(e, ImageError::Problem(ImageProblem::ExtentChanged { .. })),
        "{e}"
    );
    assert_eq!(conversion.image(), second.app());
    drop(conversion);
    assert_clean(&instance);
}

#[test]
fn the_tensor_range_is_checked_against_the_tensor_and_the_device() {
    let Some((instance, device)) = device("the_tensor_range_is_checked") else {
        return;
    };
    let img = image(&device, vk::Format::R8G8B8A8_UNORM);
    let spec = TensorSpec::new("t", DType::F32, shape(TensorLayout::Nchw, 3));
    let buffer = tensor_buffer(&device, 4 * (W * H) as usize);
    let conv = ImageToTensor::default();
    let small = buffer.slice(Some(100));
    // SAFETY: live handles; the conversion is never recorded.
    let e = unsafe { ImageConversion::image_to_tensor(&device, img.app(), &spec, small, &conv) }
        .unwrap_err();
    assert!(
        matches!(
            e,
            ImageError::Problem(ImageProblem::TooSmall { size: 100, .. })
        ),
        "{e}"
    );
    let alignment = device
        .capabilities()
        .limits
        .min_storage_buffer_offset_alignment;
    if alignment > 1 {
        let mut odd = buffer.slice(None);
        odd.offset = 1;
        odd.size -= 1;
        // SAFETY: as above.
        let e = unsafe { ImageConversion::image_to_tensor(&device, img.app(), &spec, odd, &conv) }
            .unwrap_err();
        assert!(
            matches!(
                e,
                ImageError::Problem(ImageProblem::Misaligned { offset: 1, .. })
            ),
            "{e}"
        );
    }
    assert_clean(&instance);
}

/// A device with the fp16 kernels' features enabled, or `None` after a skip.
fn f16_device(test: &str) -> Option<(vk_core::Instance, Device)> {
    let req = Requirements::new("vk-core image test (f16)").require_features(
        vk_core::Features::SHADER_FLOAT16 | vk_core::Features::STORAGE_BUFFER_16BIT,
    );
    testing::device(test, &req)
}

#[test]
fn images_round_trip_through_fp16_tensors() {
    let Some((instance, device)) = f16_device("images_round_trip_through_fp16_tensors") else {
        return;
    };
    let format = vk::Format::R8G8B8A8_UNORM;
    let src = image(&device, format);
    src.write(&pattern(format));
    let dst = image(&device, format);
    let c = 3;
    let spec = TensorSpec::new("t", DType::F16, shape(TensorLayout::Nchw, c));
    // Three halves per texel: an odd element count, neighbours sharing 32-bit words.
    let buffer = Buffer::new(
        &device,
        (c * (W * H) as usize * 2).div_ceil(16) as u64 * 16,
        MemoryLocation::Host,
        vk::BufferUsageFlags::STORAGE_BUFFER,
        "f16 tensor",
    )
    .unwrap();
    let read = ImageToTensor::default();
    let write = TensorToImage::default();
    // SAFETY: images and buffer are live and outlive the conversions' submissions.
    let (into, back) = unsafe {
        (
            ImageConversion::image_to_tensor(&device, src.app(), &spec, buffer.slice(None), &read)
                .unwrap(),
            ImageConversion::tensor_to_image(&device, &spec, buffer.slice(None), dst.app(), &write)
                .unwrap(),
        )
    };
    run(&device, &into);
    let mut raw = vec![0u8; c * (W * H) as usize * 2];
    buffer.read(0, &mut raw).unwrap();
    for y in 0..H {
        for x in 0..W {
            let t = decode(format, &encode(format, texel(x, y)));
            for (ch, want) in t.iter().enumerate().take(c) {
                let i = index(TensorLayout::Nchw, c, ch, x, y) * 2;
                let v = f16_value(u16::from_le_bytes([raw[i], raw[i + 1]]));
                assert!((v - want).abs() <= 1e-3, "({x},{y}) c{ch}: {v} != {want}");
            }
        }
    }
    run(&device, &back);
    let out = dst.read();
    let want = src.read();
    for (i, (a, b)) in out.iter().zip(&want).enumerate() {
        // RGB round trips through f16 exactly at 8 bits; alpha is written as 1.
        let expected = if i % 4 == 3 { 255 } else { *b };
        assert!(a.abs_diff(expected) <= 1, "byte {i}: {a} != {expected}");
    }
    assert_clean(&instance);
}

#[test]
fn fp16_tensors_need_the_f16_features() {
    let Some((instance, device)) = device("fp16_tensors_need_the_f16_features") else {
        return;
    };
    if device
        .enabled()
        .features
        .contains(vk_core::Features::SHADER_FLOAT16 | vk_core::Features::STORAGE_BUFFER_16BIT)
    {
        eprintln!("note: the device enabled the f16 features itself; nothing to refuse");
        return;
    }
    let img = image(&device, vk::Format::R8G8B8A8_UNORM);
    let spec = TensorSpec::new("t", DType::F16, shape(TensorLayout::Nchw, 3));
    let buffer = tensor_buffer(&device, 3 * (W * H) as usize);
    // SAFETY: as above; the conversion is refused before anything is recorded.
    let e = unsafe {
        ImageConversion::image_to_tensor(
            &device,
            img.app(),
            &spec,
            buffer.slice(None),
            &ImageToTensor::default(),
        )
    };
    assert!(
        matches!(e, Err(ImageError::Problem(ImageProblem::F16NotEnabled))),
        "{e:?}"
    );
    assert_clean(&instance);
}
