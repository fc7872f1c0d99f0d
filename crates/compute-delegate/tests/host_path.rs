//! Host inputs and outputs of a compute graph along every [`HostPath`]: small tensors copied
//! by the recorded command buffer, large ones by the graph's host transfer (pipelined
//! staging over several chunks, imported host memory), through `execute` and the
//! device-resident `write_input` / `read_output`; large weights through the same transfer.
//! Validation is on.

use compute_delegate::{BuildOptions, GraphBuilder};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{DType, HostPath, HostTensor};

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| (i % 1013) as f32 * 0.5 + seed).collect()
}

#[test]
fn add_round_trips_along_every_host_path() {
    let Some((instance, dev)) = testing::device(
        "add_round_trips_along_every_host_path",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    // 2 MiB + 12 bytes: above the recorded-copy limit, several 64 KiB chunks and a remainder.
    let sizes = [1000usize, (2 << 20) / 4 + 3];
    for path in [
        HostPath::Direct,
        HostPath::Staged { chunk: 64 << 10 },
        HostPath::staged(),
        HostPath::Imported,
    ] {
        for &n in &sizes {
            let mut g = GraphBuilder::new();
            let x = g.input("x", DType::F32, &[n]).unwrap();
            let y = g.input("y", DType::F32, &[n]).unwrap();
            let z = g.add(x, y).unwrap();
            g.output(z).unwrap();
            let opts = BuildOptions {
                host_path: Some(path),
                ..Default::default()
            };
            let mut graph = g.build_with(&dev, &opts).unwrap();
            let (a, b) = (values(n, 1.0), values(n, 0.25));
            let want: Vec<f32> = a.iter().zip(&b).map(|(p, q)| p + q).collect();
            let xs = HostTensor::from_f32(vec![n], &a).unwrap();
            let ys = HostTensor::from_f32(vec![n], &b).unwrap();
            let out = graph.execute(&[xs.clone(), ys.clone()]).unwrap();
            assert_eq!(
                out[0].to_f32().unwrap(),
                want,
                "{path:?}, {n} elements, execute"
            );
            graph.write_input(0, &ys).unwrap();
            graph.write_input(1, &xs).unwrap();
            // SAFETY: no semaphores; the inputs were written and waited for.
            unsafe { graph.submit(&[], &[]) }.unwrap();
            graph.wait().unwrap();
            let out = graph.read_output(0).unwrap();
            assert_eq!(
                out.to_f32().unwrap(),
                want,
                "{path:?}, {n} elements, resident"
            );
        }
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn large_weights_are_uploaded_through_the_host_transfer() {
    let Some((instance, dev)) = testing::device(
        "large_weights_are_uploaded_through_the_host_transfer",
        &compute_delegate::requirements(),
    ) else {
        return;
    };
    let n = (2 << 20) / 4 + 3;
    let w = values(n, 3.0);
    for path in [HostPath::Staged { chunk: 64 << 10 }, HostPath::Imported] {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[n]).unwrap();
        let c = g.constant_f32("w", &[n], &w).unwrap();
        let z = g.add(x, c).unwrap();
        g.output(z).unwrap();
        let opts = BuildOptions {
            host_path: Some(path),
            ..Default::default()
        };
        let mut graph = g.build_with(&dev, &opts).unwrap();
        let a = values(n, -1.0);
        let want: Vec<f32> = a.iter().zip(&w).map(|(p, q)| p + q).collect();
        let out = graph
            .execute(&[HostTensor::from_f32(vec![n], &a).unwrap()])
            .unwrap();
        assert_eq!(out[0].to_f32().unwrap(), want, "{path:?}");
    }
    assert_no_validation_errors(&instance);
}
