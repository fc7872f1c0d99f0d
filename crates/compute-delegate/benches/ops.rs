//! Criterion benchmarks of a few ops on small shapes (any device; lavapipe in CI).

use compute_delegate::{Conv2d, GraphBuilder};
use criterion::{Criterion, criterion_group, criterion_main};
use vk_core::{DType, Device, HostTensor};

fn input(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| (i % 97) as f32 / 97.0 - 0.5).collect();
    HostTensor::from_f32(shape.to_vec(), &v).expect("valid tensor")
}

fn ops(c: &mut Criterion) {
    let device = match Device::open(&compute_delegate::requirements()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIPPED compute-delegate benches: {e}");
            return;
        }
    };
    let shape = [4usize, 64, 64];
    {
        let mut g = GraphBuilder::new();
        let a = g.input("a", DType::F32, &shape).expect("input");
        let b = g.input("b", DType::F32, &shape).expect("input");
        let s = g.add(a, b).expect("add");
        g.output(s).expect("output");
        let mut graph = g.build(&device).expect("build");
        let ins = [input(&shape), input(&shape)];
        c.bench_function("add 2x[4,64,64]", |bch| {
            bch.iter(|| graph.execute(&ins).expect("execute"))
        });
    }
    {
        let mut g = GraphBuilder::new();
        let a = g.input("x", DType::F32, &[64, 256]).expect("input");
        let s = g.softmax(a, -1).expect("softmax");
        g.output(s).expect("output");
        let mut graph = g.build(&device).expect("build");
        let ins = [input(&[64, 256])];
        c.bench_function("softmax [64,256]", |bch| {
            bch.iter(|| graph.execute(&ins).expect("execute"))
        });
    }
    {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[1, 16, 16, 16]).expect("input");
        let w = g.constant("w", input(&[16, 16, 3, 3])).expect("weights");
        let p = Conv2d {
            padding: [1, 1],
            ..Conv2d::default()
        };
        let y = g.conv2d(x, w, None, p).expect("conv");
        g.output(y).expect("output");
        let mut graph = g.build(&device).expect("build");
        let ins = [input(&[1, 16, 16, 16])];
        c.bench_function("conv3x3 16->16 [1,16,16,16]", |bch| {
            bch.iter(|| graph.execute(&ins).expect("execute"))
        });
    }
    {
        let mut g = GraphBuilder::new();
        let a = g.input("a", DType::F32, &[64, 64]).expect("input");
        let b = g.input("b", DType::F32, &[64, 64]).expect("input");
        let m = g.matmul(a, b).expect("matmul");
        g.output(m).expect("output");
        let mut graph = g.build(&device).expect("build");
        let ins = [input(&[64, 64]), input(&[64, 64])];
        c.bench_function("matmul 64^3", |bch| {
            bch.iter(|| graph.execute(&ins).expect("execute"))
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = ops
}
criterion_main!(benches);
