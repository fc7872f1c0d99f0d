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

/// Reads an `.npy` file (f32, i64, i32, i16, i8, u8, bool; C order).
pub fn read(path: &Path) -> Result<HostTensor> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let bytes = std::fs::read(path).map_err(|e| err(&e))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|e| err(&e))?;
    if npy.order() != npyz::Order::C {
        return Err(err(
            &"Fortran-order arrays are not supported; save with C order",
        ));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let descr = match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => return Err(err(&format!("unsupported dtype {other:?}"))),
    };
    let (dtype, data): (DType, Vec<u8>) = match descr.as_str() {
        "<f4" => (
            DType::F32,
            flat(npy.into_vec::<f32>(), |v| v.to_le_bytes().to_vec(), path)?,
        ),
        "<i4" => (
            DType::I32,
            flat(npy.into_vec::<i32>(), |v| v.to_le_bytes().to_vec(), path)?,
        ),
        "<i2" => (
            DType::I16,
            flat(npy.into_vec::<i16>(), |v| v.to_le_bytes().to_vec(), path)?,
        ),
        "<i8" => (
            DType::I64,
            flat(npy.into_vec::<i64>(), |v| v.to_le_bytes().to_vec(), path)?,
        ),
        "|i1" => (
            DType::I8,
            flat(npy.into_vec::<i8>(), |v| vec![v as u8], path)?,
        ),
        "|u1" => (DType::U8, flat(npy.into_vec::<u8>(), |v| vec![v], path)?),
        "|b1" => (
            DType::Bool,
            flat(npy.into_vec::<bool>(), |v| vec![v as u8], path)?,
        ),
        other => return Err(err(&format!("unsupported dtype {other}"))),
    };
    HostTensor::new(dtype, shape, data).map_err(|e| err(&e))
}

fn flat<T>(v: std::io::Result<Vec<T>>, f: impl Fn(T) -> Vec<u8>, path: &Path) -> Result<Vec<u8>> {
    Ok(v.map_err(|e| format!("{}: {e}", path.display()))?
        .into_iter()
        .flat_map(f)
        .collect())
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
        DType::F16 => Err(format!(
            "{}: writing f16 .npy files is not supported",
            path.display()
        )),
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
        ] {
            let p = dir.join("t.npy");
            write(&p, &t).unwrap();
            assert_eq!(read(&p).unwrap(), t);
        }
    }
}
