//! `.npy` files to and from host tensors.

// Builds without any delegate use none of the helpers below.
#![cfg_attr(
    not(any(feature = "vgf", feature = "compute")),
    allow(dead_code, unused_imports)
)]

use std::path::Path;

use npyz::WriterBuilder;

use vkdelegate::vk_core::{DType, HostTensor};

type Result<T> = std::result::Result<T, String>;

/// Reads an `.npy` file (f32, f16, i64, i32, i16, i8, u8, bool; C or Fortran order, the
/// latter converted to C order).
pub fn read(path: &Path) -> Result<HostTensor> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let bytes = std::fs::read(path).map_err(|e| err(&e))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| err(&e))?;
    let fortran = npy.order() == npyz::Order::Fortran;
    let shape: Vec<usize> = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| err(&format!("dimension {d} is too large"))))
        .collect::<Result<_>>()?;
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => return Err(err(&format!("unsupported dtype {other:?}"))),
    };
    let (dtype, data) = read_data(npy, &descr).map_err(|e| err(&e))?;
    let data = if fortran {
        fortran_to_c(&data, &shape, dtype.size()).map_err(|e| err(&e))?
    } else {
        data
    };
    HostTensor::new(dtype, shape, data).map_err(|e| err(&e))
}

/// The elements in storage order, as little-endian bytes.
fn read_data(npy: npyz::NpyFile<&[u8]>, descr: &str) -> Result<(DType, Vec<u8>)> {
    Ok(match descr {
        "<f4" => (DType::F32, flat(npy.into_vec::<f32>(), f32::to_le_bytes)?),
        "<f2" => (
            DType::F16,
            flat(npy.into_vec::<half::f16>(), half::f16::to_le_bytes)?,
        ),
        "<i4" => (DType::I32, flat(npy.into_vec::<i32>(), i32::to_le_bytes)?),
        "<i2" => (DType::I16, flat(npy.into_vec::<i16>(), i16::to_le_bytes)?),
        "<i8" => (DType::I64, flat(npy.into_vec::<i64>(), i64::to_le_bytes)?),
        "|i1" => (DType::I8, flat(npy.into_vec::<i8>(), i8::to_le_bytes)?),
        "|u1" => (DType::U8, flat(npy.into_vec::<u8>(), |v| [v])?),
        "|b1" => (
            DType::Bool,
            flat(npy.into_vec::<bool>(), |v| [u8::from(v)])?,
        ),
        other => return Err(format!("unsupported dtype {other}")),
    })
}

fn flat<T, const N: usize>(
    v: std::io::Result<Vec<T>>,
    f: impl Fn(T) -> [u8; N],
) -> Result<Vec<u8>> {
    Ok(v.map_err(|e| e.to_string())?
        .into_iter()
        .flat_map(f)
        .collect())
}

/// Reorders the elements of a column-major (Fortran-order) array of `shape` into row-major
/// (C) order; `elem` is the element size in bytes.
fn fortran_to_c(data: &[u8], shape: &[usize], elem: usize) -> Result<Vec<u8>> {
    let count = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} has too many elements"))?;
    if count.checked_mul(elem) != Some(data.len()) {
        return Err(format!(
            "shape {shape:?} of {elem}-byte elements needs {} bytes, the file holds {}",
            count.saturating_mul(elem),
            data.len()
        ));
    }
    // Column-major strides, in elements: the first dimension varies fastest.
    let mut strides = Vec::with_capacity(shape.len());
    let mut stride = 1usize;
    for &d in shape {
        strides.push(stride);
        stride *= d;
    }
    let mut out = Vec::with_capacity(data.len());
    let mut index = vec![0usize; shape.len()];
    for _ in 0..count {
        let src: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&data[src * elem..(src + 1) * elem]);
        // Advance the row-major multi-index: the last dimension varies fastest.
        for (i, &d) in index.iter_mut().zip(shape).rev() {
            *i += 1;
            if *i < d {
                break;
            }
            *i = 0;
        }
    }
    Ok(out)
}

/// Writes a host tensor as `.npy`.
pub fn write(path: &Path, t: &HostTensor) -> Result<()> {
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    let b = t.bytes();
    match t.dtype() {
        DType::F32 => write_as(path, &shape, le4(b).map(f32::from_le_bytes)),
        DType::I32 => write_as(path, &shape, le4(b).map(i32::from_le_bytes)),
        DType::I64 => write_as(
            path,
            &shape,
            b.chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
        ),
        DType::I16 => write_as(
            path,
            &shape,
            b.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]])),
        ),
        DType::I8 => write_as(path, &shape, b.iter().map(|&v| v as i8)),
        DType::U8 => write_as(path, &shape, b.iter().copied()),
        DType::Bool => write_as(path, &shape, b.iter().map(|&v| v != 0)),
        DType::F16 => write_as(
            path,
            &shape,
            b.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]])),
        ),
    }
}

fn le4(b: &[u8]) -> impl Iterator<Item = [u8; 4]> + '_ {
    b.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]])
}

fn write_as<T: npyz::AutoSerialize>(
    path: &Path,
    shape: &[u64],
    data: impl IntoIterator<Item = T>,
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| err(&e))?);
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(file)
        .begin_nd()
        .map_err(|e| err(&e))?;
    w.extend(data).map_err(|e| err(&e))?;
    w.finish().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = std::env::temp_dir().join(format!("vkdelegate-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for t in [
            HostTensor::from_f32(vec![2, 3], &[1.0, 2.0, 3.0, -4.0, 5.5, 6.0]).unwrap(),
            HostTensor::from_i8(vec![4], &[-1, 2, -3, 4]).unwrap(),
            HostTensor::from_i32(vec![1, 1, 2], &[7, -8]).unwrap(),
            HostTensor::new(
                DType::F16,
                vec![3],
                [1.5f32, -2.0, 0.25]
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                    .collect(),
            )
            .unwrap(),
        ] {
            let p = dir.join("t.npy");
            write(&p, &t).unwrap();
            assert_eq!(read(&p).unwrap(), t);
        }
    }

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("vkdelegate-npy-f-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    /// Writes `data`, given in column-major storage order, as a Fortran-order file.
    fn write_fortran<T: npyz::AutoSerialize>(path: &Path, shape: &[u64], data: Vec<T>) {
        let file = std::fs::File::create(path).unwrap();
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .order(npyz::Order::Fortran)
            .writer(file)
            .begin_nd()
            .unwrap();
        w.extend(data).unwrap();
        w.finish().unwrap();
    }

    /// The column-major storage order of a row-major `[2, 3]` array holding 0..6.
    const F23: [usize; 6] = [0, 3, 1, 4, 2, 5];

    #[test]
    fn fortran_order_is_read_in_c_order_for_every_dtype() {
        let p = temp("f23.npy");
        let shape = [2u64, 3];
        let c: Vec<usize> = (0..6).collect();
        let check = |want: HostTensor| assert_eq!(read(&p).unwrap(), want);

        write_fortran(&p, &shape, F23.map(|v| v as f32 - 2.5).to_vec());
        check(
            HostTensor::from_f32(
                vec![2, 3],
                &c.iter().map(|&v| v as f32 - 2.5).collect::<Vec<_>>(),
            )
            .unwrap(),
        );
        write_fortran(&p, &shape, F23.map(|v| v as i32 - 3).to_vec());
        check(
            HostTensor::from_i32(
                vec![2, 3],
                &c.iter().map(|&v| v as i32 - 3).collect::<Vec<_>>(),
            )
            .unwrap(),
        );
        write_fortran(&p, &shape, F23.map(|v| v as i8 - 3).to_vec());
        check(
            HostTensor::from_i8(
                vec![2, 3],
                &c.iter().map(|&v| v as i8 - 3).collect::<Vec<_>>(),
            )
            .unwrap(),
        );

        let bytes = |dtype: DType, per: &dyn Fn(usize) -> Vec<u8>| {
            HostTensor::new(dtype, vec![2, 3], c.iter().flat_map(|&v| per(v)).collect()).unwrap()
        };
        write_fortran(&p, &shape, F23.map(|v| v as i64 * -1000).to_vec());
        check(bytes(DType::I64, &|v| {
            (v as i64 * -1000).to_le_bytes().to_vec()
        }));
        write_fortran(&p, &shape, F23.map(|v| v as i16 * -100).to_vec());
        check(bytes(DType::I16, &|v| {
            (v as i16 * -100).to_le_bytes().to_vec()
        }));
        write_fortran(&p, &shape, F23.map(|v| v as u8 + 250).to_vec());
        check(bytes(DType::U8, &|v| vec![v as u8 + 250]));
        write_fortran(&p, &shape, F23.map(|v| v % 3 == 0).to_vec());
        check(bytes(DType::Bool, &|v| vec![u8::from(v % 3 == 0)]));
    }

    #[test]
    fn fortran_order_of_rank_0_1_and_4() {
        let p = temp("ranks.npy");
        write_fortran(&p, &[], vec![7i32]);
        assert_eq!(
            read(&p).unwrap(),
            HostTensor::from_i32(vec![], &[7]).unwrap()
        );
        write_fortran(&p, &[3], vec![1i32, 2, 3]);
        assert_eq!(
            read(&p).unwrap(),
            HostTensor::from_i32(vec![3], &[1, 2, 3]).unwrap()
        );

        // [2, 3, 1, 4] holding 1000a + 100b + 10c + d at [a, b, c, d].
        let shape = [2usize, 3, 1, 4];
        let value =
            |a: usize, b: usize, c: usize, d: usize| (1000 * a + 100 * b + 10 * c + d) as i32;
        let mut storage = Vec::new();
        for d in 0..shape[3] {
            for c in 0..shape[2] {
                for b in 0..shape[1] {
                    for a in 0..shape[0] {
                        storage.push(value(a, b, c, d));
                    }
                }
            }
        }
        let mut row_major = Vec::new();
        for a in 0..shape[0] {
            for b in 0..shape[1] {
                for c in 0..shape[2] {
                    for d in 0..shape[3] {
                        row_major.push(value(a, b, c, d));
                    }
                }
            }
        }
        write_fortran(&p, &shape.map(|d| d as u64), storage);
        assert_eq!(
            read(&p).unwrap(),
            HostTensor::from_i32(shape.to_vec(), &row_major).unwrap()
        );
    }

    #[test]
    fn a_short_fortran_buffer_is_an_error() {
        let e = fortran_to_c(&[0; 5], &[2, 3], 1).unwrap_err();
        assert!(
            e.contains("[2, 3]") && e.contains("6 bytes") && e.contains('5'),
            "{e}"
        );
    }
}
