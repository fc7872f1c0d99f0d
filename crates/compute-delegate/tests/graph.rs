//! Graph-level behaviour: errors that name tensors and numbers, input checks, memory reuse,
//! derived barriers, the pipeline cache and device-resident execution.

use compute_delegate::{BuildOptions, Compare, Conv2d, Error, GraphBuilder, Pool2d, TensorId};
use vk_core::barrier::{self, Access};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{DType, Device, HostPath, HostTensor, Instance, SemaphoreSignal, SemaphoreWait, vk};

fn device(test: &str) -> Option<(Instance, Device)> {
    testing::device(test, &compute_delegate::requirements())
}

#[test]
fn bad_graphs_name_the_tensor_and_the_numbers() {
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F32, &[2, 3]).unwrap();
    let b = g.input("b", DType::F32, &[4]).unwrap();
    let e = g.add(a, b).unwrap_err().to_string();
    assert!(
        e.contains("'a' [2, 3]") && e.contains("'b' [4]") && e.contains("3 vs 4"),
        "{e}"
    );

    let i = g.input("idx", DType::I32, &[2, 3]).unwrap();
    let e = g.mul(a, i).unwrap_err();
    assert!(matches!(e, Error::DType { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("'idx'") && e.contains("i32") && e.contains("f32"),
        "{e}"
    );

    let w = g.input("w", DType::F32, &[5, 4]).unwrap();
    let e = g.matmul(a, w).unwrap_err().to_string();
    assert!(e.contains("k = 3") && e.contains("k = 5"), "{e}");

    let mut other = GraphBuilder::new();
    let mut foreign = other.input("o", DType::F32, &[1]).unwrap();
    for _ in 0..9 {
        foreign = other.relu(foreign).unwrap();
    }
    let e = g.relu(foreign).unwrap_err().to_string();
    assert!(
        e.contains("unknown tensor id 9") && e.contains("has 4 tensors"),
        "{e}"
    );

    assert!(g.reshape(a, &[]).is_err());
    let e = g.reshape(a, &[4, 2]).unwrap_err().to_string();
    assert!(
        e.contains("'a' [2, 3] (6 elements)") && e.contains("[4, 2]"),
        "{e}"
    );

    let e = g.softmax(a, 2).unwrap_err().to_string();
    assert!(e.contains("dim 2") && e.contains("rank 2"), "{e}");

    let x = g.input("img", DType::F32, &[1, 3, 4, 4]).unwrap();
    let k = g.input("k", DType::F32, &[8, 2, 3, 3]).unwrap();
    let e = g
        .conv2d(x, k, None, compute_delegate::Conv2d::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("3 channels") && e.contains("[8, 2, 3, 3]"),
        "{e}"
    );
    let e = g.max_pool2d(x, Pool2d::new(5, 1)).unwrap_err().to_string();
    assert!(e.contains("kernel 5") && e.contains("dim of 4"), "{e}");
}

#[test]
fn execute_checks_inputs_and_limits_are_checked_in_bytes() {
    let Some((instance, dev)) = device("execute_checks_inputs_and_limits_are_checked_in_bytes")
    else {
        return;
    };
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F32, &[2, 3]).unwrap();
    let r = g.relu(a).unwrap();
    g.output(r).unwrap();
    let mut graph = g.build(&dev).unwrap();
    let e = graph.execute(&[]).unwrap_err().to_string();
    assert_eq!(e, "execute: the graph has 1 input(s), got 0");
    let bad = HostTensor::from_f32(vec![3, 2], &[0.0; 6]).unwrap();
    let e = graph.execute(&[bad]).unwrap_err().to_string();
    assert!(
        e.contains("input 0 ('a')") && e.contains("[2, 3]") && e.contains("[3, 2]"),
        "{e}"
    );
    let bad = HostTensor::from_i32(vec![2, 3], &[0; 6]).unwrap();
    let e = graph.execute(&[bad]).unwrap_err().to_string();
    assert!(e.contains("f32") && e.contains("i32"), "{e}");

    // A tensor over maxStorageBufferRange (in bytes, not elements): refused at build, before
    // anything is allocated.
    let limit = dev.capabilities().limits.max_storage_buffer_range as usize;
    let elems = limit / 4 + 1;
    let mut g = GraphBuilder::new();
    let big = g.input("big", DType::F32, &[elems]).unwrap();
    let s = g.sigmoid(big).unwrap();
    g.output(s).unwrap();
    let e = g.build(&dev).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("'big'")
            && e.contains(&format!("{}", (elems * 4).div_ceil(16) * 16))
            && e.contains(&limit.to_string()),
        "{e}"
    );
    // A graph without outputs.
    let mut g = GraphBuilder::new();
    g.input("x", DType::F32, &[4]).unwrap();
    assert!(
        g.build(&dev)
            .unwrap_err()
            .to_string()
            .contains("no outputs")
    );
    // Broadcasting that needs more than six dims after merging.
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F32, &[4, 1, 2, 1, 3, 1, 2]).unwrap();
    let b = g.input("b", DType::F32, &[1, 3, 1, 2, 1, 2, 1]).unwrap();
    let c = g.add(a, b).unwrap();
    g.output(c).unwrap();
    let e = g.build(&dev).unwrap_err().to_string();
    assert!(e.contains("needs 7 dims; at most 6"), "{e}");
    drop(graph);
    assert_no_validation_errors(&instance);
}

#[test]
fn execute_into_writes_the_callers_outputs_and_checks_them_first() {
    let Some((instance, dev)) = device("execute_into_writes_the_callers_outputs") else {
        return;
    };
    // 2 MiB and a bit: above the size that goes through the graph's host transfer.
    let n = (2 << 20) / 4 + 3;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 48.0).collect();
    let input = HostTensor::from_f32(vec![n], &x).unwrap();
    for path in [None, Some(HostPath::Staged { chunk: 64 << 10 })] {
        let mut g = GraphBuilder::new();
        let a = g.input("a", DType::F32, &[n]).unwrap();
        let r = g.relu(a).unwrap();
        let s = g.mul(a, a).unwrap();
        g.output(r).unwrap();
        g.output(s).unwrap();
        let options = BuildOptions {
            host_path: path,
            ..Default::default()
        };
        let mut graph = g.build_with(&dev, &options).unwrap();
        let want = graph.execute(std::slice::from_ref(&input)).unwrap();
        let mut outs = [
            HostTensor::zeros(DType::F32, vec![n]).unwrap(),
            HostTensor::zeros(DType::F32, vec![n]).unwrap(),
        ];
        for _ in 0..2 {
            graph
                .execute_into(std::slice::from_ref(&input), &mut outs)
                .unwrap();
            assert!(outs[0] == want[0] && outs[1] == want[1], "{path:?}");
        }
        let e = graph
            .execute_into(std::slice::from_ref(&input), &mut outs[..1])
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::OutputCount {
                    expected: 2,
                    actual: 1
                }
            ),
            "{e:?}"
        );
        let mut wrong = [
            outs[0].clone(),
            HostTensor::zeros(DType::F32, vec![n - 1]).unwrap(),
        ];
        let e = graph
            .execute_into(std::slice::from_ref(&input), &mut wrong)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("output 1")
                && e.contains(&format!("[{n}]"))
                && e.contains(&format!("[{}]", n - 1)),
            "{e}"
        );
        // Checked before running: the first tensor is as the last good run left it.
        assert!(wrong[0] == want[0]);
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn intermediates_share_memory_and_independent_dispatches_have_no_barrier() {
    let Some((instance, dev)) =
        device("intermediates_share_memory_and_independent_dispatches_have_no_barrier")
    else {
        return;
    };
    // A chain of five elementwise ops on 1024 floats, built unfused (else it is one dispatch).
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[1024]).unwrap();
    let mut t = x;
    for _ in 0..5 {
        t = g.add_scalar(t, 1.0).unwrap();
    }
    g.output(t).unwrap();
    let unfused = BuildOptions {
        unfused: true,
        ..Default::default()
    };
    let mut graph = g.build_with(&dev, &unfused).unwrap();
    let m = graph.memory();
    // Elementwise kernels work in place: one buffer for all four intermediates.
    assert_eq!(m.intermediates_unshared, 4 * 4096);
    assert_eq!(m.intermediates, 4096, "{m:?}");
    assert_eq!(m.io, 2 * 4096);
    assert_eq!(m.peak_device_bytes(), 3 * 4096);
    assert_eq!(graph.dispatch_count(), 5);
    assert_eq!(graph.barrier_count(), 4);
    let out = graph
        .execute(&[HostTensor::from_f32(vec![1024], &[1.0; 1024]).unwrap()])
        .unwrap();
    assert_eq!(out[0].to_f32().unwrap(), vec![6.0; 1024]);

    // Three independent ops of one input: no barrier between them.
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[64]).unwrap();
    for t in [
        g.relu(x).unwrap(),
        g.sigmoid(x).unwrap(),
        g.tanh(x).unwrap(),
    ] {
        g.output(t).unwrap();
    }
    let graph2 = g.build(&dev).unwrap();
    assert_eq!(graph2.barrier_count(), 0);
    // cat writes disjoint parts of one buffer: no barrier either.
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[4, 4]).unwrap();
    let c = g.cat(&[x, x, x], 0).unwrap();
    g.output(c).unwrap();
    assert_eq!(g.build(&dev).unwrap().barrier_count(), 0);
    // A GEMM with few output tiles and a long K is split along K, then summed.
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F32, &[130, 600]).unwrap();
    let b = g.input("b", DType::F32, &[600, 70]).unwrap();
    let c = g.matmul(a, b).unwrap();
    g.output(c).unwrap();
    let mut split = g.build(&dev).unwrap();
    assert_eq!(split.dispatch_count(), 2);
    let profile = split.profile().unwrap();
    assert_eq!(profile.len(), 2);
    assert_eq!(
        (profile[0].op, profile[0].kernel.as_str()),
        ("matmul", "Gemm")
    );
    assert_eq!(profile[1].kernel, "SplitSum");
    // Two tiles: 16 splits at most, of a depth of 32 or more, whole multiples of 8: 15 of 40.
    assert_eq!(profile[0].groups[2], 15, "fifteen K splits");
    assert_eq!(split.barrier_count(), 1);
    assert_eq!(split.memory().intermediates, 15 * 130 * 70 * 4);
    drop((graph, graph2, split));
    assert_no_validation_errors(&instance);
}

#[test]
fn pipeline_cache_round_trips() {
    let Some((instance, dev)) = device("pipeline_cache_round_trips") else {
        return;
    };
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[2, 8]).unwrap();
    let s = g.softmax(x, -1).unwrap();
    g.output(s).unwrap();
    let first = g.build(&dev).unwrap();
    let data = first.pipeline_cache_data().unwrap();
    let opts = compute_delegate::BuildOptions {
        pipeline_cache: Some(data),
        ..Default::default()
    };
    let mut second = g.build_with(&dev, &opts).unwrap();
    // Data from elsewhere is ignored, not passed to the driver.
    let junk = compute_delegate::BuildOptions {
        pipeline_cache: Some(b"not a pipeline cache".to_vec()),
        ..Default::default()
    };
    drop(g.build_with(&dev, &junk).unwrap());
    let out = second
        .execute(&[HostTensor::from_f32(vec![2, 8], &[0.0; 16]).unwrap()])
        .unwrap();
    assert_eq!(out[0].to_f32().unwrap(), vec![0.125; 16]);
    drop((first, second));
    assert_no_validation_errors(&instance);
}

/// Graphs built on one device share its pipelines: a second build of a graph compiles none, a
/// graph with one new kernel compiles that one, both run, and a build given pipeline-cache
/// data compiles its own (the data it hands back must hold them).
#[test]
fn graphs_on_one_device_share_pipelines() {
    let Some((instance, dev)) = device("graphs_on_one_device_share_pipelines") else {
        return;
    };
    let graph = |sigmoid: bool| {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[2, 8]).unwrap();
        let mut y = g.softmax(x, -1).unwrap();
        if sigmoid {
            y = g.sigmoid(y).unwrap();
        }
        g.output(y).unwrap();
        g
    };
    let off = BuildOptions {
        disk_cache: vk_core::DiskCache::Off,
        ..BuildOptions::default()
    };
    let first = graph(false).build_with(&dev, &off).unwrap();
    let all = first.compiled_pipelines();
    assert!(all >= 1, "the first graph compiles its pipelines");
    let mut again = graph(false).build_with(&dev, &off).unwrap();
    assert_eq!(again.compiled_pipelines(), 0, "the same graph again");
    let mut more = graph(true).build_with(&dev, &off).unwrap();
    assert_eq!(more.compiled_pipelines(), 1, "only the sigmoid is new");
    let own = BuildOptions {
        pipeline_cache: Some(Vec::new()),
        ..BuildOptions::default()
    };
    let mut mine = graph(false).build_with(&dev, &own).unwrap();
    assert_eq!(
        mine.compiled_pipelines(),
        all,
        "given cache data, a build keeps its own"
    );
    drop(first);
    let x = HostTensor::from_f32(vec![2, 8], &[0.0; 16]).unwrap();
    let sig = 1.0 / (1.0 + (-0.125f32).exp());
    for (g, want) in [(&mut again, 0.125), (&mut mine, 0.125), (&mut more, sig)] {
        let out = g.execute(std::slice::from_ref(&x)).unwrap();
        for v in out[0].to_f32().unwrap() {
            assert!((v - want).abs() < 1e-6, "{v} vs {want}");
        }
    }
    drop((again, more, mine));
    assert_no_validation_errors(&instance);
}

/// Builds of one graph on several threads at once compile each pipeline once between them:
/// one build compiles it, the others wait for it, and every graph runs.
#[test]
fn builds_at_once_compile_each_pipeline_once() {
    let Some((instance, dev)) = device("builds_at_once_compile_each_pipeline_once") else {
        return;
    };
    let graph = || {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[4, 8]).unwrap();
        let y = g.softmax(x, -1).unwrap();
        let y = g.sigmoid(y).unwrap();
        let y = g.sum(y, &[1], false).unwrap();
        g.output(y).unwrap();
        g
    };
    let off = BuildOptions {
        disk_cache: vk_core::DiskCache::Off,
        ..BuildOptions::default()
    };
    let mut builds: Vec<_> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|_| s.spawn(|| graph().build_with(&dev, &off).unwrap()))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let compiled: usize = builds.iter().map(|g| g.compiled_pipelines()).sum();
    let mut alone = graph()
        .build_with(
            &dev,
            &BuildOptions {
                pipeline_cache: Some(Vec::new()),
                ..BuildOptions::default()
            },
        )
        .unwrap();
    assert!(
        alone.compiled_pipelines() >= 2,
        "the graph has several pipelines"
    );
    assert_eq!(
        compiled,
        alone.compiled_pipelines(),
        "each pipeline compiled once among the builds"
    );
    let x = HostTensor::from_f32(vec![4, 8], &[0.0; 32]).unwrap();
    let want = 8.0 / (1.0 + (-0.125f32).exp());
    for g in builds.iter_mut().chain([&mut alone]) {
        let out = g.execute(std::slice::from_ref(&x)).unwrap();
        for v in out[0].to_f32().unwrap() {
            assert!((v - want).abs() < 1e-5, "{v} vs {want}");
        }
    }
    assert_no_validation_errors(&instance);
}

/// Elementwise chains that differ only in their parameters (a scale, a clamp's bounds, an
/// immediate) share one pipeline: the parameters are bound as a buffer, so a second graph of
/// the same steps compiles nothing, and each graph computes with its own values.
#[test]
fn chains_differing_in_parameters_share_a_pipeline() {
    let Some((instance, dev)) = device("chains_differing_in_parameters_share_a_pipeline") else {
        return;
    };
    let graph = |scale: f32, lo: f32, hi: f32, shift: f32| {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[3, 5]).unwrap();
        let y = g.mul_scalar(x, scale).unwrap();
        let y = g.clamp(y, lo, hi).unwrap();
        let y = g.add_scalar(y, shift).unwrap();
        g.output(y).unwrap();
        g
    };
    let off = BuildOptions {
        disk_cache: vk_core::DiskCache::Off,
        ..BuildOptions::default()
    };
    let xs: Vec<f32> = (0..15).map(|i| i as f32 - 7.0).collect();
    let x = HostTensor::from_f32(vec![3, 5], &xs).unwrap();
    let params = [
        (0.5, -1.0, 2.0, 0.25),
        (3.0, -4.0, 5.0, -1.5),
        (-2.0, 0.0, 6.0, 7.0),
    ];
    for (i, &(scale, lo, hi, shift)) in params.iter().enumerate() {
        let mut g = graph(scale, lo, hi, shift).build_with(&dev, &off).unwrap();
        assert_eq!(g.kernels(), ["Elementwise"]);
        if i > 0 {
            assert_eq!(
                g.compiled_pipelines(),
                0,
                "chain {i}: its steps' pipeline exists"
            );
        }
        let out = g.execute(std::slice::from_ref(&x)).unwrap()[0]
            .to_f32()
            .unwrap();
        for (v, &xv) in out.iter().zip(&xs) {
            let want = (xv * scale).clamp(lo, hi) + shift;
            assert!((v - want).abs() < 1e-6, "chain {i}: {v} vs {want}");
        }
    }
    assert_no_validation_errors(&instance);
}

/// The disk cache: the first build writes the device's file, a second build of the same
/// graph finds every pipeline there and leaves the file as it was, a build with new pipelines
/// adds them, a damaged file is a cold cache, and `DiskCache::Off` writes nothing.
#[test]
fn pipeline_caches_persist_on_disk() {
    let Some((instance, dev)) = device("pipeline_caches_persist_on_disk") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("vkdelegate-disk-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let at = |dir: &std::path::Path| BuildOptions {
        disk_cache: vk_core::DiskCache::At(dir.to_path_buf()),
        ..BuildOptions::default()
    };
    let graph = |softmax: bool| {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, &[2, 8]).unwrap();
        let y = match softmax {
            true => g.softmax(x, -1).unwrap(),
            false => g.sigmoid(x).unwrap(),
        };
        g.output(y).unwrap();
        g
    };
    let files = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    drop(graph(true).build_with(&dev, &at(&dir)).unwrap());
    let [file] = &files(&dir)[..] else {
        panic!("one file expected in {}: {:?}", dir.display(), files(&dir));
    };
    let first = std::fs::read(file).unwrap();
    assert!(
        first.len() >= 32,
        "{} bytes: not even a header",
        first.len()
    );
    drop(graph(true).build_with(&dev, &at(&dir)).unwrap());
    assert_eq!(
        std::fs::read(file).unwrap(),
        first,
        "nothing new: the file stays"
    );
    drop(graph(false).build_with(&dev, &at(&dir)).unwrap());
    let grown = std::fs::read(file).unwrap();
    if first.len() > 32 {
        assert!(
            grown.len() > first.len(),
            "{} then {} bytes",
            first.len(),
            grown.len()
        );
    } else {
        // Lavapipe keeps no pipelines in a VkPipelineCache (its data is the header alone).
        eprintln!(
            "note: {} keeps no pipelines in its pipeline cache",
            dev.capabilities().name
        );
    }
    std::fs::write(file, b"damaged").unwrap();
    let mut g = graph(true).build_with(&dev, &at(&dir)).unwrap();
    let out = g
        .execute(&[HostTensor::from_f32(vec![2, 8], &[0.0; 16]).unwrap()])
        .unwrap();
    assert_eq!(out[0].to_f32().unwrap(), vec![0.125; 16]);
    assert!(std::fs::read(file).unwrap().len() >= 32, "rewritten");
    let off = dir.join("off");
    let opts = BuildOptions {
        disk_cache: vk_core::DiskCache::Off,
        ..BuildOptions::default()
    };
    drop(graph(true).build_with(&dev, &opts).unwrap());
    assert!(files(&off).is_empty());
    drop(g);
    let _ = std::fs::remove_dir_all(&dir);
    assert_no_validation_errors(&instance);
}

/// Two graphs chained on the device: the second reads the first's output buffer, ordered by
/// a semaphore, with one host copy at each end.
#[test]
fn device_resident_chaining_with_a_semaphore() {
    let Some((instance, dev)) = device("device_resident_chaining_with_a_semaphore") else {
        return;
    };
    for force_staging in [false, true] {
        let opts = compute_delegate::BuildOptions {
            force_staging,
            ..Default::default()
        };
        let shape = [1usize, 3, 8, 8];
        let mut g1 = GraphBuilder::new();
        let x = g1.input("x", DType::F32, &shape).unwrap();
        let p = g1.avg_pool2d(x, Pool2d::new(2, 2)).unwrap();
        let s = g1.sigmoid(p).unwrap();
        g1.output(s).unwrap();
        let mut a = g1.build_with(&dev, &opts).unwrap();
        let mut g2 = GraphBuilder::new();
        let y = g2.input("y", DType::F32, &[1, 3, 4, 4]).unwrap();
        let sq = g2.mul(y, y).unwrap();
        let z = g2.add_scalar(sq, 0.25).unwrap();
        g2.output(z).unwrap();
        let mut b = g2.build_with(&dev, &opts).unwrap();

        let xs: Vec<f32> = (0..192).map(|i| (i as f32 * 0.37).sin()).collect();
        // Reference through host execution.
        let mid = a
            .execute(&[HostTensor::from_f32(shape.to_vec(), &xs).unwrap()])
            .unwrap();
        let want = b.execute(&mid).unwrap()[0].to_f32().unwrap();

        // Clear b's output (b on zeros gives 0.25 everywhere), and put x into a's input buffer.
        let zeros = HostTensor::from_f32(vec![1, 3, 4, 4], &[0.0; 48]).unwrap();
        assert_eq!(
            b.execute(&[zeros]).unwrap()[0].to_f32().unwrap(),
            vec![0.25; 48]
        );
        a.write_input(0, &HostTensor::from_f32(shape.to_vec(), &xs).unwrap())
            .unwrap();

        // Device path: copy a's output buffer into b's input buffer in a command buffer of ours,
        // ordered after a by a semaphore, and b after the copy by another.
        let d = dev.raw();
        let src = a.device_outputs()[0].clone();
        let dst = b.device_inputs()[0].clone();
        assert_eq!(src.spec.bytes(), dst.spec.bytes());
        let bytes = src.spec.bytes().unwrap() as u64;
        // SAFETY: plain object creation and recording with live handles; every submission is
        // waited for before the objects are destroyed.
        unsafe {
            let sem = |_: u8| {
                d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None)
                    .unwrap()
            };
            let (s1, s2) = (sem(0), sem(1));
            let pool = d
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default().queue_family_index(dev.queue().family()),
                    None,
                )
                .unwrap();
            let cmd = d
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(pool)
                        .level(vk::CommandBufferLevel::PRIMARY)
                        .command_buffer_count(1),
                )
                .unwrap()[0];
            d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
                .unwrap();
            d.cmd_copy_buffer(
                cmd,
                src.slice.buffer,
                dst.slice.buffer,
                &[vk::BufferCopy::default()
                    .src_offset(src.slice.offset)
                    .dst_offset(dst.slice.offset)
                    .size(bytes)],
            );
            d.end_command_buffer(cmd).unwrap();
            let fence = d
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .unwrap();

            a.submit(&[], &[SemaphoreSignal::binary(s1)]).unwrap();
            {
                let cmds = [cmd];
                let waits = [s1];
                let stages = [vk::PipelineStageFlags::TRANSFER];
                let signals = [s2];
                let info = [vk::SubmitInfo::default()
                    .command_buffers(&cmds)
                    .wait_semaphores(&waits)
                    .wait_dst_stage_mask(&stages)
                    .signal_semaphores(&signals)];
                let guard = dev.queue().lock();
                guard.submit(&info, fence).unwrap();
            }
            b.submit(
                &[SemaphoreWait::binary(
                    s2,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                )],
                &[],
            )
            .unwrap();
            b.wait().unwrap();
            a.wait().unwrap();
            dev.wait_for_fence(fence, u64::MAX).unwrap();
            d.destroy_fence(fence, None);
            d.destroy_command_pool(pool, None);
            d.destroy_semaphore(s1, None);
            d.destroy_semaphore(s2, None);
        }
        let got = b.read_output(0).unwrap().to_f32().unwrap();
        assert_eq!(got, want);
        assert!(a.last_device_time().is_some() || !dev.capabilities().queue_families.is_empty());
        // Direct mapping only where device memory is the host's (CPU drivers, integrated
        // GPUs); discrete GPUs stage even when they expose host-visible VRAM (resizable BAR).
        let caps = dev.capabilities();
        let unified = matches!(
            caps.device_type,
            vk_core::DeviceType::Cpu | vk_core::DeviceType::Integrated
        ) && caps.memory.has_unified(64 << 20);
        // Under `VKDELEGATE_HOST_PATH`, the override decides instead.
        let direct = match vk_core::HostPath::from_env().unwrap() {
            Some(path) => path.io() == vk_core::HostIo::Direct,
            None => unified,
        };
        assert_eq!(a.uses_staging(), force_staging || !direct);
        drop((a, b));
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn graphs_can_move_between_threads() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<compute_delegate::Graph>();
    sync::<compute_delegate::Graph>();
    send::<compute_delegate::GraphBuilder>();
}

/// Records `a` then `b` into one command buffer, with a barrier between them (and before and
/// after, against the graphs' own transfer submissions), and runs it.
fn run_pair(dev: &Device, a: &compute_delegate::Graph, b: &compute_delegate::Graph) {
    let mut sub = vk_core::Submission::new(dev, 1, "test pair").unwrap_or_else(|e| panic!("{e}"));
    let cmd = sub.begin(0).unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: `cmd` is recording on this device; both graphs outlive the wait below and have
    // no submission pending; the barriers order every access.
    unsafe {
        barrier::memory_barrier(dev, cmd, Access::ANY_WRITE, Access::ANY);
        a.record_into(cmd);
        barrier::memory_barrier(dev, cmd, Access::SHADER_WRITE, Access::SHADER_READ_WRITE);
        b.record_into(cmd);
        barrier::memory_barrier(dev, cmd, Access::ANY_WRITE, Access::ANY);
    }
    sub.end(0).unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: an executable command buffer; no semaphores.
    unsafe { sub.submit(0, &[], &[]) }.unwrap_or_else(|e| panic!("{e}"));
    sub.wait().unwrap_or_else(|e| panic!("{e}"));
}

/// A graph reading another graph's output buffer directly (an external input), one writing
/// straight into a consumer's input buffer (an external output), and a rebinding: each gives
/// what running the graphs one after the other through the host gives.
#[test]
fn graphs_read_and_write_each_others_buffers() {
    let Some((instance, dev)) = device("graphs_read_and_write_each_others_buffers") else {
        return;
    };
    for force_staging in [false, true] {
        let opts = compute_delegate::BuildOptions {
            force_staging,
            ..Default::default()
        };
        let shape = [1usize, 3, 8, 8];
        let mut g1 = GraphBuilder::new();
        let x = g1.input("x", DType::F32, &shape).unwrap();
        let p = g1.avg_pool2d(x, Pool2d::new(2, 2)).unwrap();
        let s = g1.sigmoid(p).unwrap();
        g1.output(s).unwrap();
        let mut g2 = GraphBuilder::new();
        let y = g2.input("y", DType::F32, &[1, 3, 4, 4]).unwrap();
        let sq = g2.mul(y, y).unwrap();
        let z = g2.add_scalar(sq, 0.25).unwrap();
        g2.output(z).unwrap();
        // Wiring is checkable without a device.
        assert!(g1.output_specs()[0].same_layout(&g2.input_specs()[0]));

        let xs: Vec<f32> = (0..192).map(|i| (i as f32 * 0.37).sin()).collect();
        let x_host = HostTensor::from_f32(shape.to_vec(), &xs).unwrap();
        let mut a = g1.build_with(&dev, &opts).unwrap();
        let mut b_alone = g2.build_with(&dev, &opts).unwrap();
        let mid = a.execute(std::slice::from_ref(&x_host)).unwrap();
        let want = b_alone.execute(&mid).unwrap()[0].to_f32().unwrap();

        // b reads a's output buffer: no buffer of its own for that input.
        let mut ext = opts.clone();
        // SAFETY: a's output buffer has storage and transfer usage and outlives b.
        unsafe { ext.external.bind_input(0, a.device_outputs()[0].slice) };
        let mut b = g2.build_with(&dev, &ext).unwrap();
        assert_eq!(b.device_inputs()[0].slice, a.device_outputs()[0].slice);
        assert!(b.memory().io < b_alone.memory().io);
        a.write_input(0, &x_host).unwrap();
        run_pair(&dev, &a, &b);
        assert_eq!(b.read_output(0).unwrap().to_f32().unwrap(), want);
        // Host execution still works: through staging into a's buffer.
        assert_eq!(b.execute(&mid).unwrap()[0].to_f32().unwrap(), want);

        // a2 writes straight into b_alone's input buffer; a semaphore orders b_alone after it.
        let mut ext = opts.clone();
        // SAFETY: b_alone's input buffer has storage and transfer usage and outlives a2.
        unsafe {
            ext.external
                .bind_output(0, b_alone.device_inputs()[0].slice)
        };
        let mut a2 = g1.build_with(&dev, &ext).unwrap();
        a2.write_input(0, &x_host).unwrap();
        let d = dev.raw();
        // SAFETY: a plain semaphore, destroyed after both submissions were waited for.
        let sem = unsafe { d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None) }.unwrap();
        // SAFETY: a fresh binary semaphore, signaled once and waited once.
        unsafe {
            a2.submit(&[], &[SemaphoreSignal::binary(sem)]).unwrap();
            b_alone
                .submit(
                    &[SemaphoreWait::binary(
                        sem,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                    )],
                    &[],
                )
                .unwrap();
        }
        b_alone.wait().unwrap();
        a2.wait().unwrap();
        // SAFETY: no pending submission uses it.
        unsafe { d.destroy_semaphore(sem, None) };
        assert_eq!(b_alone.read_output(0).unwrap().to_f32().unwrap(), want);

        // Rebinding b's input to a third graph's output.
        let mut c = g1.build_with(&dev, &opts).unwrap();
        let xs2: Vec<f32> = xs.iter().map(|v| v * 0.5 - 0.1).collect();
        let x2 = HostTensor::from_f32(shape.to_vec(), &xs2).unwrap();
        let want2 = b_alone
            .execute(&c.execute(std::slice::from_ref(&x2)).unwrap())
            .unwrap()[0]
            .to_f32()
            .unwrap();
        // SAFETY: c's output buffer has storage and transfer usage and outlives b.
        unsafe { b.rebind_input(0, c.device_outputs()[0].slice) }.unwrap();
        assert_eq!(b.device_inputs()[0].slice, c.device_outputs()[0].slice);
        c.write_input(0, &x2).unwrap();
        run_pair(&dev, &c, &b);
        assert_eq!(b.read_output(0).unwrap().to_f32().unwrap(), want2);

        // Bindings that do not fit are refused with the numbers.
        let slice = a.device_outputs()[0].slice;
        let mut bad = opts.clone();
        let small = vk_core::BufferSlice { size: 16, ..slice };
        // SAFETY: refused before use.
        unsafe { bad.external.bind_input(0, small) };
        let e = g2.build_with(&dev, &bad).unwrap_err();
        assert!(matches!(e, Error::BindingTooSmall { need: 192, .. }), "{e}");
        let mut bad = opts.clone();
        // SAFETY: refused before use.
        unsafe { bad.external.bind_output(1, slice) };
        let e = g2.build_with(&dev, &bad).unwrap_err().to_string();
        assert_eq!(e, "output 1 does not exist: the graph has 1");
        let align = dev
            .capabilities()
            .limits
            .min_storage_buffer_offset_alignment;
        if align > 1 {
            let mut bad = opts.clone();
            let shifted = vk_core::BufferSlice {
                offset: slice.offset + 1,
                ..slice
            };
            // SAFETY: refused before use.
            unsafe { bad.external.bind_input(0, shifted) };
            let e = g2.build_with(&dev, &bad).unwrap_err();
            assert!(matches!(e, Error::BindingMisaligned { .. }), "{e}");
        }
        drop((b, a, a2, b_alone, c));
    }
    assert_no_validation_errors(&instance);
}

#[test]
fn embedded_graphs_build_no_host_path_and_say_so() {
    let Some((instance, dev)) = device("embedded_graphs_build_no_host_path_and_say_so") else {
        return;
    };
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[4, 64]).unwrap();
    let y = b.relu(x).unwrap();
    b.output(y).unwrap();
    let staged = BuildOptions {
        force_staging: true,
        ..BuildOptions::default()
    };
    assert!(b.build_with(&dev, &staged).unwrap().memory().staging > 0);
    let embedded = BuildOptions {
        embedded: true,
        ..staged
    };
    let mut g = b.build_with(&dev, &embedded).unwrap();
    assert_eq!(g.memory().staging, 0);
    let input = HostTensor::from_f32(vec![4, 64], &[1.0; 256]).unwrap();
    let e = g
        .execute(std::slice::from_ref(&input))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("execute: this graph was built to run only inside"),
        "{e}"
    );
    let e = g.write_input(0, &input).unwrap_err().to_string();
    assert!(e.contains("write_input"), "{e}");
    // Its dispatches still record into an owner's command buffer, and profile.
    assert_eq!(g.dispatch_count(), 1);
    match g.profile() {
        Ok(times) => assert_eq!(times.len(), 1),
        Err(e) => assert!(e.to_string().contains("no timestamps"), "{e}"),
    }
    assert_no_validation_errors(&instance);
}

/// Random f32 data of `n` elements in [-1, 1).
/// `b` built twice, with `options(false)` then `options(true)` (a pass on, then off).
fn built_both(
    b: &GraphBuilder,
    dev: &Device,
    options: impl Fn(bool) -> BuildOptions,
) -> [compute_delegate::Graph; 2] {
    [false, true].map(|off| b.build_with(dev, &options(off)).expect("the graph builds"))
}

/// A device for a test computing in `dtype` (in f16, one with the f16 features).
fn device_for(test: &str, dtype: DType) -> Option<(Instance, Device)> {
    match dtype {
        DType::F16 => testing::device(test, &compute_delegate::f16_requirements()),
        _ => device(test),
    }
}

/// Runs a graph built fused and unfused (`built_both`) on `inputs` and checks every output of
/// the first within `[fp32, fp16]` (as `dtype` is) of the largest magnitude of the second's;
/// the fused outputs.
fn assert_close_to_unfused(
    built: &mut [compute_delegate::Graph; 2],
    inputs: &[HostTensor],
    dtype: DType,
    [fp32, fp16]: [f32; 2],
) -> Vec<HostTensor> {
    let [fused, unfused] = built
        .each_mut()
        .map(|g| g.execute(inputs).expect("the graph runs"));
    for (i, (f, u)) in fused.iter().zip(&unfused).enumerate() {
        let float = |t: &HostTensor| t.to_f32().expect("a float output");
        let (f, u) = (float(f), float(u));
        let scale = u.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
        let tol = if dtype == DType::F16 { fp16 } else { fp32 } * scale;
        for (e, (a, w)) in f.iter().zip(&u).enumerate() {
            assert!(
                (a - w).abs() <= tol,
                "{dtype:?} output {i}[{e}]: fused {a}, unfused {w}"
            );
        }
    }
    fused
}

fn data(seed: u32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed)
                .wrapping_mul(2_654_435_761)
                .rotate_left(13);
            (h % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

#[test]
fn passes_compute_what_the_graph_computes() {
    let test = "passes_compute_what_the_graph_computes";
    let Some((i16, d16)) = testing::device(test, &compute_delegate::f16_requirements()) else {
        return;
    };
    let Some((i32_, d32)) = device(test) else {
        return;
    };
    // f16 edges on both sides, constants, a conv, a product, a softmax, and a dead branch.
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F16, &[1, 4, 6, 6]).unwrap();
    let w = b.constant_f16("w", &[8, 4, 3, 3], &data(1, 288)).unwrap();
    let y = b
        .conv2d(x, w, None, compute_delegate::Conv2d::default())
        .unwrap();
    let y = b.reshape(y, &[8, 16]).unwrap();
    let m = b.constant_f16("m", &[16, 5], &data(2, 80)).unwrap();
    let z = b.matmul(y, m).unwrap();
    let dead = b.sigmoid(z).unwrap();
    let _ = b.mul(dead, dead).unwrap();
    let z = b.softmax(z, -1).unwrap();
    b.output(z).unwrap();
    let x32 = b.input_specs()[0].clone();
    let bytes = data(3, 144)
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect();
    let input = HostTensor::new(DType::F16, x32.shape.clone(), bytes).unwrap();
    let run = |g: &GraphBuilder, dev: &Device| {
        let out = g
            .build(dev)
            .unwrap()
            .execute(std::slice::from_ref(&input))
            .unwrap();
        out[0]
            .bytes()
            .chunks_exact(2)
            .map(|h| half::f16::from_le_bytes([h[0], h[1]]).to_f32())
            .collect::<Vec<f32>>()
    };
    let want = run(&b, &d16);
    let pruned = b.without_dead_nodes();
    assert_eq!(pruned.node_count(), b.node_count() - 2);
    assert_eq!(run(&pruned, &d16), want, "dead nodes");
    // Widened: runs on a device without the f16 features, within fp16's rounding.
    let wide = b.widened_to_f32();
    assert!(!wide.uses_f16() && b.uses_f16());
    let got = run(&wide, &d32);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 2e-2, "element {i}: {g} against fp16's {w}");
    }
    assert_no_validation_errors(&i16);
    assert_no_validation_errors(&i32_);
}

#[test]
fn constants_over_the_binding_limit_are_cut_into_pieces_that_fit() {
    let test = "constants_over_the_binding_limit_are_cut_into_pieces_that_fit";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    // A linear with bias, a product with a constant right side and a lookup, each of whose
    // constant is several times the binding limit below.
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[3, 64]).unwrap();
    let ids = b.input("ids", DType::I32, &[5]).unwrap();
    let w = b.constant_f32("w", &[300, 64], &data(1, 300 * 64)).unwrap();
    let bias = b.constant_f32("bias", &[300], &data(2, 300)).unwrap();
    let m = b.constant_f32("m", &[64, 290], &data(3, 64 * 290)).unwrap();
    let t = b
        .constant_f32("table", &[50, 310], &data(4, 50 * 310))
        .unwrap();
    let y = b.linear(x, w, Some(bias)).unwrap();
    let y = b.relu(y).unwrap();
    let z = b.matmul(x, m).unwrap();
    let e = b.embedding(t, ids).unwrap();
    for o in [y, z, e] {
        b.output(o).unwrap();
    }
    let inputs = [
        HostTensor::from_f32(vec![3, 64], &data(5, 192)).unwrap(),
        HostTensor::from_i32(vec![5], &[49, 0, 7, 7, 23]).unwrap(),
    ];
    let mut whole = b.build(&dev).unwrap();
    let want = whole.execute(&inputs).unwrap();
    let small = BuildOptions {
        max_binding_bytes: Some(16 << 10),
        ..BuildOptions::default()
    };
    let mut cut = b.build_with(&dev, &small).unwrap();
    // 7 pieces of the linear (48 of its 300 rows each), 7 of the product, 5 of the table and
    // 3 concats in place of 3 dispatches.
    assert!(
        cut.dispatch_count() >= whole.dispatch_count() + 19,
        "{} dispatches cut, {} whole",
        cut.dispatch_count(),
        whole.dispatch_count()
    );
    let got = cut.execute(&inputs).unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "output {i}");
        for (k, (g, w)) in g
            .to_f32()
            .unwrap()
            .iter()
            .zip(w.to_f32().unwrap())
            .enumerate()
        {
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "output {i}[{k}]: {g} vs {w}"
            );
        }
    }
    // A tensor that is not a constant cannot be cut: named.
    let mut g = GraphBuilder::new();
    let x = g.input("wide", DType::F32, &[8192]).unwrap();
    let y = g.relu(x).unwrap();
    g.output(y).unwrap();
    let e = g.build_with(&dev, &small).unwrap_err();
    assert!(
        matches!(e, Error::TooLarge { .. }) && e.to_string().contains("'wide'"),
        "{e}"
    );
    assert_no_validation_errors(&inst);
}

/// A node repeating an earlier one runs once: the same op on the same operand (or on a small
/// constant of the same bytes), read directly or through a view; results are those of the
/// graph as written.
#[test]
fn repeated_nodes_run_once() {
    let test = "repeated_nodes_run_once";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    let xs = data(7, 32);
    let ms = data(8, 8);
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[4, 8]).unwrap();
    let m1 = b.constant_f32("m1", &[8], &ms).unwrap();
    let m2 = b.constant_f32("m2", &[8], &ms).unwrap();
    let s1 = b.sigmoid(x).unwrap();
    let s2 = b.sigmoid(x).unwrap();
    let a1 = b.add(s1, m1).unwrap();
    let a2 = b.add(s2, m2).unwrap();
    let v2 = b.reshape(a2, &[32]).unwrap();
    let y = b.mul_scalar(v2, 2.0).unwrap();
    let z = b.add(a1, s2).unwrap();
    for o in [s1, y, z] {
        b.output(o).unwrap();
    }
    assert_eq!(b.node_count(), 6);
    let mut g = b.build(&dev).unwrap();
    // sigmoid, add, mul_scalar, add: the second sigmoid and the second add are merged.
    assert_eq!(g.dispatch_count(), 4, "{:?}", g.kernels());
    let out = g
        .execute(&[HostTensor::from_f32(vec![4, 8], &xs).unwrap()])
        .unwrap();
    let sig: Vec<f32> = xs.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    let add: Vec<f32> = sig.iter().enumerate().map(|(i, s)| s + ms[i % 8]).collect();
    let want = [
        sig.clone(),
        add.iter().map(|v| v * 2.0).collect(),
        add.iter()
            .zip(&sig)
            .map(|(a, s)| a + s)
            .collect::<Vec<f32>>(),
    ];
    for (i, (o, w)) in out.iter().zip(&want).enumerate() {
        for (k, (g, w)) in o.to_f32().unwrap().iter().zip(w).enumerate() {
            assert!((g - w).abs() <= 1e-6, "output {i}[{k}]: {g} vs {w}");
        }
    }
    assert_no_validation_errors(&inst);
}

/// `x * sigmoid(x)` runs as one SiLU dispatch, the operands in either order; a sigmoid read
/// elsewhere too is left alone; `y * sigmoid(s)` of another tensor `s`, broadcast or not, is
/// one `mul_sigmoid` dispatch. Results are the graph's as written; `aten.silu.default` runs
/// the same kernel.
#[test]
fn silu_is_one_dispatch() {
    let test = "silu_is_one_dispatch";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    let (xs, ys) = (data(9, 24), data(10, 24));
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[2, 12]).unwrap();
    let y = b.input("y", DType::F32, &[2, 12]).unwrap();
    let s1 = b.sigmoid(x).unwrap();
    let f1 = b.mul(x, s1).unwrap();
    let s2 = b.sigmoid(y).unwrap();
    let f2 = b.mul(s2, y).unwrap();
    let s3 = b.sigmoid(f2).unwrap();
    let kept = b.mul(f2, s3).unwrap();
    let also = b.add_scalar(s3, 1.0).unwrap();
    let s4 = b.sigmoid(f1).unwrap();
    let other = b.mul(y, s4).unwrap();
    let silu = compute_delegate::ops::find("aten.silu.default")
        .unwrap()
        .call(&mut b, vec![compute_delegate::ops::Arg::Tensor(y)])
        .unwrap()[0];
    // A squeeze-excite gate: x times the sigmoid of a [2, 1] tensor, broadcast.
    let gs = data(11, 2);
    let gt = b.input("gate", DType::F32, &[2, 1]).unwrap();
    let sg = b.sigmoid(gt).unwrap();
    let gated = b.mul(sg, x).unwrap();
    for o in [f1, kept, also, other, silu, gated] {
        b.output(o).unwrap();
    }
    let mut g = b.build(&dev).unwrap();
    // silu, silu, sigmoid + mul + add (s3 read twice), the gate of y (mul_sigmoid), silu (the
    // op), the broadcast gate (mul_sigmoid).
    assert_eq!(g.dispatch_count(), 8, "{:?}", g.kernels());
    let out = g
        .execute(&[
            HostTensor::from_f32(vec![2, 12], &xs).unwrap(),
            HostTensor::from_f32(vec![2, 12], &ys).unwrap(),
            HostTensor::from_f32(vec![2, 1], &gs).unwrap(),
        ])
        .unwrap();
    let sig = |v: f32| 1.0 / (1.0 + (-v).exp());
    let f1: Vec<f32> = xs.iter().map(|&v| v * sig(v)).collect();
    let f2: Vec<f32> = ys.iter().map(|&v| v * sig(v)).collect();
    let want = [
        f1.clone(),
        f2.iter().map(|&v| v * sig(v)).collect(),
        f2.iter().map(|&v| sig(v) + 1.0).collect(),
        ys.iter().zip(&f1).map(|(&y, &f)| y * sig(f)).collect(),
        f2,
        xs.iter()
            .enumerate()
            .map(|(i, &v)| v * sig(gs[i / 12]))
            .collect(),
    ];
    for (i, (o, w)) in out.iter().zip(&want).enumerate() {
        for (k, (g, w)) in o.to_f32().unwrap().iter().zip(w).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "output {i}[{k}]: {g} vs {w}"
            );
        }
    }
    assert_no_validation_errors(&inst);
}

/// MobileNetV3's squeeze-excite gate, `x * relu6(s + 3) / 6` as exporters decompose it (a sum
/// with a constant, a clamp below then above, a quotient by a constant), is one dispatch; a
/// hard sigmoid read twice keeps its steps.
#[test]
fn hard_gates_are_one_dispatch() {
    let test = "hard_gates_are_one_dispatch";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    // Gates on both sides of the clamp's bounds.
    let xs = data(12, 2 * 6 * 5);
    let ss: Vec<f32> = data(13, 2 * 6).iter().map(|v| v * 8.0).collect();
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[2, 6, 5]).unwrap();
    let s = b.input("s", DType::F32, &[2, 6, 1]).unwrap();
    let hard = |b: &mut GraphBuilder, s| {
        let three = b.constant_f32("three", &[1], &[3.0]).unwrap();
        let six = b.constant_f32("six", &[1], &[6.0]).unwrap();
        let sum = b.add(s, three).unwrap();
        let low = b.clamp(sum, 0.0, f32::MAX).unwrap();
        let high = b.clamp(low, f32::MIN, 6.0).unwrap();
        b.div(high, six).unwrap()
    };
    let h = hard(&mut b, s);
    let gated = b.mul(x, h).unwrap();
    let s2 = b.input("s2", DType::F32, &[2, 6, 1]).unwrap();
    let twice = hard(&mut b, s2);
    let kept = b.mul(twice, x).unwrap();
    for o in [gated, kept, twice] {
        b.output(o).unwrap();
    }
    let mut g = b.build(&dev).unwrap();
    // The gate alone; then the read-twice sigmoid's steps as one chain, and its product.
    assert_eq!(g.dispatch_count(), 3, "{:?}", g.kernels());
    assert_eq!(g.kernels()[0], "BinaryBcast");
    let out = g
        .execute(&[
            HostTensor::from_f32(vec![2, 6, 5], &xs).unwrap(),
            HostTensor::from_f32(vec![2, 6, 1], &ss).unwrap(),
            HostTensor::from_f32(vec![2, 6, 1], &ss).unwrap(),
        ])
        .unwrap();
    for (i, o) in out[..2].iter().enumerate() {
        for (k, g) in o.to_f32().unwrap().iter().enumerate() {
            let w = xs[k] * ((ss[k / 5] + 3.0).clamp(0.0, 6.0) / 6.0);
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                "output {i}[{k}]: {g} vs {w}"
            );
        }
    }
    assert_no_validation_errors(&inst);
}

#[test]
fn a_large_convolution_applies_its_residual_and_activation() {
    // At least 132 blocks of 128 pixels, so that on NV cooperative matrices 2 this is the
    // implicit GEMM (`conv_coop2.comp`), which adds the residual at each pixel of its patches
    // (a width not a multiple of the patch's: patches past the edge); the plain kernels
    // elsewhere.
    let test = "a_large_convolution_applies_its_residual_and_activation";
    for dtype in [DType::F32, DType::F16] {
        let Some((inst, dev)) = device_for(test, dtype) else {
            return;
        };
        let (n, c, h, w) = (2usize, 16usize, 96usize, 100usize);
        let mut b = GraphBuilder::new();
        b.set_float(dtype);
        let mut input = |name: &str| {
            let x = b.input(name, DType::F32, &[n, c, h, w]).unwrap();
            b.cast(x, dtype).unwrap()
        };
        let (x, r) = (input("x"), input("r"));
        let v: Vec<f32> = data(90, c * c * 9).iter().map(|v| v * 0.25).collect();
        let k = b.constant_f32("k", &[c, c, 3, 3], &v).unwrap();
        let k = b.cast(k, dtype).unwrap();
        let pad = Conv2d {
            padding: [1, 1],
            ..Default::default()
        };
        let y = b.conv2d(x, k, None, pad).unwrap();
        let y = b.add(y, r).unwrap();
        let y = b.relu(y).unwrap();
        let y = b.cast(y, DType::F32).unwrap();
        b.output(y).unwrap();
        let inputs: Vec<HostTensor> = [91, 92]
            .map(|seed| HostTensor::from_f32(vec![n, c, h, w], &data(seed, n * c * h * w)).unwrap())
            .into();
        let mut built = built_both(&b, &dev, |unfused| BuildOptions {
            unfused,
            ..Default::default()
        });
        let kernels = built[0].kernels();
        assert!(
            !kernels.iter().any(|k| k.starts_with("Binary")),
            "the add is fused: {kernels:?}"
        );
        assert_close_to_unfused(&mut built, &inputs, dtype, [1e-5, 1e-2]);
        assert_no_validation_errors(&inst);
    }
}

/// Products and convolutions apply the residual add and the activation that read their
/// results as they store them (one dispatch where there were two or three), with the same
/// results as the graph built unfused, in fp32 and fp16: a linear layer and its GELU; one
/// and its residual; a split-K product, its residual and a tanh GELU (the summing pass applies
/// them); a 3x3 convolution, its residual and relu; a pointwise one, its residual and
/// hardswish; a depthwise one and its SiLU; a product of two rows and its GELU; one of two
/// rows and its residual, which its kernel does not bind: the add follows it, in place; a
/// product, its bias added by a node of its own, and a residual added through a view; a
/// prompt's gated MLP, the gate's SiLU and the product with it applied by the products.
#[test]
fn products_apply_their_residuals_and_activations() {
    use compute_delegate::UnaryOp;
    let test = "products_apply_their_residuals_and_activations";
    for dtype in [DType::F32, DType::F16] {
        let Some((inst, dev)) = device_for(test, dtype) else {
            return;
        };
        let mut b = GraphBuilder::new();
        b.set_float(dtype);
        let input = |b: &mut GraphBuilder, name: &str, shape: &[usize]| {
            let x = b.input(name, DType::F32, shape).unwrap();
            b.cast(x, dtype).unwrap()
        };
        let weight = |b: &mut GraphBuilder, name: &str, seed: u32, shape: &[usize]| {
            let n = shape.iter().product();
            let v: Vec<f32> = data(seed, n).iter().map(|v| v * 0.25).collect();
            let w = b.constant_f32(name, shape, &v).unwrap();
            b.cast(w, dtype).unwrap()
        };
        // Residuals are written before the products that add them.
        let x = input(&mut b, "x", &[40, 64]);
        let r = input(&mut b, "r", &[40, 64]);
        let deep = input(&mut b, "deep", &[16, 1024]);
        let r_deep = input(&mut b, "r_deep", &[16, 32]);
        let img = input(&mut b, "img", &[1, 8, 10, 10]);
        let r_conv = input(&mut b, "r_conv", &[1, 16, 10, 10]);
        let few = input(&mut b, "few", &[2, 64]);
        let r_few = input(&mut b, "r_few", &[2, 32]);
        let r_conv1d = input(&mut b, "r_conv1d", &[1, 40, 48]);
        let w1 = weight(&mut b, "w1", 1, &[96, 64]);
        let b1 = weight(&mut b, "b1", 2, &[96]);
        let y = b.linear(x, w1, Some(b1)).unwrap();
        let gelu = b.gelu(y, false).unwrap();
        let w2 = weight(&mut b, "w2", 3, &[64, 64]);
        let y = b.linear(x, w2, None).unwrap();
        let resid = b.add(r, y).unwrap();
        let w3 = weight(&mut b, "w3", 4, &[32, 1024]);
        let y = b.linear(deep, w3, None).unwrap();
        let y = b.add(y, r_deep).unwrap();
        let split = b.gelu(y, true).unwrap();
        let k3 = weight(&mut b, "k3", 5, &[16, 8, 3, 3]);
        let kb = weight(&mut b, "kb", 6, &[16]);
        let pad = Conv2d {
            padding: [1, 1],
            ..Default::default()
        };
        let y = b.conv2d(img, k3, Some(kb), pad).unwrap();
        let y = b.add(y, r_conv).unwrap();
        let conv = b.relu(y).unwrap();
        let k1 = weight(&mut b, "k1", 7, &[16, 16, 1, 1]);
        let y = b.conv2d(conv, k1, None, Conv2d::default()).unwrap();
        let y = b.add(y, conv).unwrap();
        let pointwise = b.hardswish(y).unwrap();
        let kd = weight(&mut b, "kd", 8, &[16, 1, 3, 3]);
        let dw = Conv2d {
            padding: [1, 1],
            groups: 16,
            ..Default::default()
        };
        let y = b.conv2d(pointwise, kd, None, dw).unwrap();
        let depthwise = b.unary(UnaryOp::Silu, y).unwrap();
        let w4 = weight(&mut b, "w4", 9, &[32, 64]);
        let y = b.linear(few, w4, None).unwrap();
        let rows = b.gelu(y, false).unwrap();
        let w5 = weight(&mut b, "w5", 10, &[32, 64]);
        let y = b.linear(few, w5, None).unwrap();
        let rows_resid = b.add(y, r_few).unwrap();
        // A GPT-2 `Conv1D`: a product, its bias added as a node, a residual through a view.
        let w6 = weight(&mut b, "w6", 11, &[64, 48]);
        let y = b.matmul(x, w6).unwrap();
        let b6 = weight(&mut b, "b6", 12, &[48]);
        let y = b.add(y, b6).unwrap();
        let y = b.reshape(y, &[1, 40, 48]).unwrap();
        let conv1d = b.add(y, r_conv1d).unwrap();
        // A prompt's gated MLP: silu(x Wg^T) * (x Wu^T), the product by the up projection's.
        let (wg, wu) = (
            weight(&mut b, "wg", 13, &[48, 64]),
            weight(&mut b, "wu", 14, &[48, 64]),
        );
        let g = b.linear(x, wg, None).unwrap();
        let g = b.unary(UnaryOp::Silu, g).unwrap();
        let u = b.linear(x, wu, None).unwrap();
        let gated = b.mul(g, u).unwrap();
        for o in [
            gelu, resid, split, depthwise, rows, rows_resid, conv1d, gated,
        ] {
            let o = b.cast(o, DType::F32).unwrap();
            b.output(o).unwrap();
        }
        let inputs: Vec<HostTensor> = b
            .input_specs()
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let n = spec.shape.iter().product();
                HostTensor::from_f32(spec.shape.clone(), &data(40 + i as u32, n)).unwrap()
            })
            .collect();
        let mut built = built_both(&b, &dev, |unfused| BuildOptions {
            unfused,
            ..Default::default()
        });
        let kernels = built[0].kernels();
        let count = |name: &str| kernels.iter().filter(|k| k.starts_with(name)).count();
        // The two-row product's residual alone is added on its own, in place.
        assert_eq!((count("Unary"), count("Binary")), (0, 1), "{kernels:?}");
        assert_eq!(
            built[1].dispatch_count() - built[0].dispatch_count(),
            13,
            "fused {kernels:?}, unfused {:?}",
            built[1].kernels()
        );
        assert_close_to_unfused(&mut built, &inputs, dtype, [1e-5, 1e-2]);
        assert_no_validation_errors(&inst);
    }
}

/// Chains of elementwise nodes run as one `elementwise.comp` dispatch each, with the same
/// results as the graph built unfused, in fp32 and fp16: a GPT-2 MLP's bias and tanh GELU as
/// its exporter writes them (nine nodes, scalar constants among them, a `pow` of the math
/// kernel); a channels-last result permuted to channels-first (read through the permute), a
/// layer scale broadcast over channels and a residual add through views that drop a dim of
/// size 1; a permute read by one sigmoid; two slices of a permute (one source at two
/// offsets); two chains that meet in
/// a product. A value read twice ends its chain, and one product's epilogue keeps its add.
#[test]
fn elementwise_chains_run_as_one_dispatch() {
    use compute_delegate::Math;
    let test = "elementwise_chains_run_as_one_dispatch";
    for dtype in [DType::F32, DType::F16] {
        let Some((inst, dev)) = device_for(test, dtype) else {
            return;
        };
        let mut b = GraphBuilder::new();
        b.set_float(dtype);
        let input = |b: &mut GraphBuilder, name: &str, shape: &[usize]| {
            let x = b.input(name, DType::F32, shape).unwrap();
            b.cast(x, dtype).unwrap()
        };
        let constant = |b: &mut GraphBuilder, name: &str, shape: &[usize], v: &[f32]| {
            let c = b.constant_f32(name, shape, v).unwrap();
            b.cast(c, dtype).unwrap()
        };
        let x = input(&mut b, "x", &[16, 96]);
        let y = input(&mut b, "y", &[1, 8, 8, 16]);
        let p = input(&mut b, "p", &[6, 5]);
        let q = input(&mut b, "q", &[16, 5]);
        let r = input(&mut b, "r", &[1, 16, 8, 8]);
        let u = input(&mut b, "u", &[4, 24]);
        let v = input(&mut b, "v", &[4, 24]);
        // GPT-2's MLP activation.
        let bias = constant(&mut b, "bias", &[96], &data(1, 96));
        let x = b.add(x, bias).unwrap();
        let scalar = |b: &mut GraphBuilder, name: &str, v: f32| constant(b, name, &[1], &[v]);
        let half = scalar(&mut b, "half", 0.5);
        let h = b.mul(x, half).unwrap();
        let cube = b.math(Math::Pow, x, 3.0).unwrap();
        let c = scalar(&mut b, "c", 0.044715);
        let cube = b.mul(cube, c).unwrap();
        let inner = b.add(x, cube).unwrap();
        let k = scalar(&mut b, "k", 0.797_884_6);
        let inner = b.mul(inner, k).unwrap();
        let t = b.tanh(inner).unwrap();
        let one = scalar(&mut b, "one", 1.0);
        let t = b.add(t, one).unwrap();
        let gelu = b.mul(h, t).unwrap();
        // A layer scale and a residual.
        let gamma = constant(&mut b, "gamma", &[16, 1, 1], &data(2, 16));
        let y = b.permute(y, &[0, 3, 1, 2]).unwrap();
        let scaled = b.mul(y, gamma).unwrap();
        let scaled = b.reshape(scaled, &[16, 8, 8]).unwrap();
        let r = b.reshape(r, &[16, 8, 8]).unwrap();
        let block = b.add(scaled, r).unwrap();
        // Two chains meeting: (u + 1) * sigmoid(v), and a value read twice.
        let u1 = b.add_scalar(u, 1.0).unwrap();
        let u2 = b.mul_scalar(u1, 3.0).unwrap();
        let v1 = b.sigmoid(v).unwrap();
        let v2 = b.sub_scalar(v1, 0.25).unwrap();
        let met = b.mul(u2, v2).unwrap();
        let twice = b.mul(met, met).unwrap();
        let twice = b.relu(twice).unwrap();
        // A permute read by one node alone.
        let p = b.permute(p, &[1, 0]).unwrap();
        let p = b.sigmoid(p).unwrap();
        // Two halves of a row sliced from a permute, a difference of them: one source, bound
        // twice at two offsets.
        let q = b.permute(q, &[1, 0]).unwrap();
        let lo = b.slice(q, 1, 0, 8, 1).unwrap();
        let hi = b.slice(q, 1, 8, 16, 1).unwrap();
        let hi = b.math(Math::Neg, hi, 0.0).unwrap();
        let halves = b.sub(lo, hi).unwrap();
        for o in [gelu, block, met, twice, p, halves] {
            let o = b.cast(o, DType::F32).unwrap();
            b.output(o).unwrap();
        }
        let inputs: Vec<HostTensor> = b
            .input_specs()
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let n = spec.shape.iter().product();
                HostTensor::from_f32(spec.shape.clone(), &data(60 + i as u32, n)).unwrap()
            })
            .collect();
        let mut built = built_both(&b, &dev, |unfused| BuildOptions {
            unfused,
            ..Default::default()
        });
        let kernels = built[0].kernels();
        let count = |name: &str| kernels.iter().filter(|k| k.starts_with(name)).count();
        // GELU, block, the meeting chains (an output, so read twice), the square and relu,
        // the permuted sigmoid and the halves; the permutes and slices are read through.
        assert_eq!(count("Elementwise"), 6, "{kernels:?}");
        let elementwise = ["Unary", "Binary", "UnaryMath", "Copy"].map(count);
        assert_eq!(elementwise, [0, 0, 0, 0], "{kernels:?}");
        assert_close_to_unfused(&mut built, &inputs, dtype, [1e-6, 1e-2]);
        assert_no_validation_errors(&inst);
    }
}

/// A ConvNeXt block as torchvision writes it runs with the results of the graph built
/// unfused, in fp32 and fp16: the depthwise convolution; the layer norm over channels, reading
/// the channels-first result through the permute that moved them last; the first linear
/// layer and its GELU; then the second and the permute back, the layer scale and the residual
/// as one chain reading through the permute (five dispatches), or, in fp16 where products run
/// on cooperative matrices or on a CPU driver, the second written channels first with the
/// layer scale folded into its weights and the residual added by it (four; three where the
/// norm folds into the first layer, on the workgroup-scope cooperative kernel).
#[test]
fn a_convnext_block_reads_through_its_permutes() {
    let test = "a_convnext_block_reads_through_its_permutes";
    for dtype in [DType::F32, DType::F16] {
        let Some((inst, dev)) = device_for(test, dtype) else {
            return;
        };
        let (c, h, w) = (16usize, 6usize, 5usize);
        let mut b = GraphBuilder::new();
        b.set_float(dtype);
        let constant = |b: &mut GraphBuilder, name: &str, seed: u32, shape: &[usize]| {
            let n = shape.iter().product();
            let v: Vec<f32> = data(seed, n).iter().map(|v| v * 0.5).collect();
            let t = b.constant_f32(name, shape, &v).unwrap();
            b.cast(t, dtype).unwrap()
        };
        let x = b.input("x", DType::F32, &[2, c, h, w]).unwrap();
        let x = b.cast(x, dtype).unwrap();
        let kd = constant(&mut b, "kd", 1, &[c, 1, 7, 7]);
        let dw = Conv2d {
            padding: [3, 3],
            groups: c,
            ..Default::default()
        };
        let y = b.conv2d(x, kd, None, dw).unwrap();
        let y = b.permute(y, &[0, 2, 3, 1]).unwrap();
        let (nw, nb) = (
            constant(&mut b, "nw", 2, &[c]),
            constant(&mut b, "nb", 3, &[c]),
        );
        let y = b.layer_norm(y, &[c], Some(nw), Some(nb), 1e-6).unwrap();
        let (w1, b1) = (
            constant(&mut b, "w1", 4, &[4 * c, c]),
            constant(&mut b, "b1", 5, &[4 * c]),
        );
        let y = b.linear(y, w1, Some(b1)).unwrap();
        let y = b.gelu(y, false).unwrap();
        let (w2, b2) = (
            constant(&mut b, "w2", 6, &[c, 4 * c]),
            constant(&mut b, "b2", 7, &[c]),
        );
        let y = b.linear(y, w2, Some(b2)).unwrap();
        let y = b.permute(y, &[0, 3, 1, 2]).unwrap();
        let gamma = constant(&mut b, "gamma", 8, &[c, 1, 1]);
        let y = b.mul(y, gamma).unwrap();
        let y = b.add(y, x).unwrap();
        let y = b.cast(y, DType::F32).unwrap();
        b.output(y).unwrap();
        let input = HostTensor::from_f32(vec![2, c, h, w], &data(70, 2 * c * h * w)).unwrap();
        // The norm reading the channels-first tensor (an option: off by default).
        let mut built = built_both(&b, &dev, |unfused| BuildOptions {
            unfused,
            channel_norms_read_through: true,
            ..Default::default()
        });
        let kernels = built[0].kernels();
        let core: Vec<&String> = kernels.iter().filter(|k| !k.starts_with("Cast")).collect();
        let fp16 = dtype == DType::F16;
        // fp16 products write channels first where they run on cooperative matrices or on a
        // CPU driver; on the workgroup-scope kernel the norm also folds into the first layer.
        let coop = compute_delegate::cooperative_gemm_kernel(&dev);
        let cpu = dev.capabilities().device_type == vk_core::DeviceType::Cpu;
        let first = fp16 && (cpu || coop.is_some());
        let folds = fp16 && coop == Some("GemmCoop2");
        let want = 5 - usize::from(first) - usize::from(folds);
        assert_eq!(core.len(), want, "{kernels:?}");
        let count = |name: &str| kernels.iter().filter(|k| k.starts_with(name)).count();
        assert_eq!(
            count("Copy") + count("Unary") + count("Binary"),
            0,
            "{kernels:?}"
        );
        assert_eq!(count("Elementwise"), usize::from(!first), "{kernels:?}");
        assert_close_to_unfused(
            &mut built,
            std::slice::from_ref(&input),
            dtype,
            [1e-5, 1e-2],
        );
        assert_no_validation_errors(&inst);
    }
}

/// A convolution's result scaled by a constant per output channel (`[c, 1, 1]`) runs as the
/// convolution alone, the scale folded into its weights and bias once at build, with the
/// results of the graph built unfused; built without folding constants, the scaled weights
/// are computed before the convolution on every run, with the same results.
#[test]
fn channel_scales_fold_into_the_convolution_before_them() {
    let test = "channel_scales_fold_into_the_convolution_before_them";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[2, 4, 6, 5]).unwrap();
    let w = b.constant_f32("w", &[8, 4, 3, 3], &data(1, 288)).unwrap();
    let bias = b.constant_f32("bias", &[8], &data(2, 8)).unwrap();
    let p = Conv2d {
        padding: [1, 1],
        ..Default::default()
    };
    let y = b.conv2d(x, w, Some(bias), p).unwrap();
    let s = b.constant_f32("s", &[8, 1, 1], &data(3, 8)).unwrap();
    let y = b.mul(s, y).unwrap();
    let y = b.relu(y).unwrap();
    b.output(y).unwrap();
    let input = HostTensor::from_f32(vec![2, 4, 6, 5], &data(4, 240)).unwrap();
    let mut built = built_both(&b, &dev, |unfused| BuildOptions {
        unfused,
        ..Default::default()
    });
    let kernels = built[0].kernels();
    assert_eq!(kernels.len(), 1, "{kernels:?}");
    let fused = assert_close_to_unfused(
        &mut built,
        std::slice::from_ref(&input),
        DType::F32,
        [1e-5, 0.0],
    );
    let unfolded = BuildOptions {
        unfolded: true,
        ..Default::default()
    };
    let mut g = b.build_with(&dev, &unfolded).unwrap();
    assert!(g.kernels().len() > 1, "the scaling runs with the graph");
    let again = g.execute(std::slice::from_ref(&input)).unwrap();
    assert_eq!(again[0].to_f32().unwrap(), fused[0].to_f32().unwrap());
    drop((built, g));
    assert_no_validation_errors(&inst);
}

/// A cat copies parts sliced or permuted out of other tensors from those tensors (a Swin patch
/// merge: four strided quarters of a channels-last map, each sliced twice, joined along the
/// channels), with no dispatch for the slices; a slice something else reads still runs.
#[test]
fn cats_copy_their_parts_from_the_tensors_sliced() {
    let test = "cats_copy_their_parts_from_the_tensors_sliced";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    let (h, w, c) = (6usize, 4usize, 3usize);
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[1, h, w, c]).unwrap();
    let rows = [0, 1].map(|r| b.slice(x, 1, r, h as isize, 2).unwrap());
    let quarter = |b: &mut GraphBuilder, r: usize, col: isize| {
        b.slice(rows[r], 2, col, w as isize, 2).unwrap()
    };
    let parts = [(0, 0), (1, 0), (0, 1), (1, 1)].map(|(r, col)| quarter(&mut b, r, col));
    let merged = b.cat(&parts, -1).unwrap();
    b.output(merged).unwrap();
    // The first quarter is also an output: its slice runs.
    let kept = b.relu(parts[0]).unwrap();
    b.output(kept).unwrap();
    let xs = data(80, h * w * c);
    let mut g = b.build(&dev).unwrap();
    let kernels = g.kernels();
    let copies = kernels.iter().filter(|k| k.starts_with("Copy")).count();
    // The four parts, and the kept quarter's two slices.
    assert_eq!(copies, 6, "{kernels:?}");
    let out = g
        .execute(&[HostTensor::from_f32(vec![1, h, w, c], &xs).unwrap()])
        .unwrap();
    let mut want = Vec::new();
    for y in 0..h / 2 {
        for x2 in 0..w / 2 {
            for (r, col) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                let at = ((2 * y + r) * w + 2 * x2 + col) * c;
                want.extend_from_slice(&xs[at..at + c]);
            }
        }
    }
    assert_eq!(out[0].to_f32().unwrap(), want);
    assert_no_validation_errors(&inst);
}

/// The attention compositions exporters write run as one `attend.comp` dispatch each, with the
/// same results as the graph as written (built unfused), in fp32 and fp16:
/// - a ViT's: heads sliced and permuted out of one QKV product, both operands scaled, PyTorch's
///   guard for rows of -inf scores, the output permuted back (written so by the kernel);
/// - a BERT's: a mask added (one row all -inf, which the guard turns to zeros), a quotient;
/// - a Swin's: a bias per head, then a mask per window added in a view that splits the batch.
#[test]
fn attention_compositions_run_as_one_dispatch() {
    use compute_delegate::Compare;
    let test = "attention_compositions_run_as_one_dispatch";
    for dtype in [DType::F32, DType::F16] {
        let Some((inst, dev)) = device_for(test, dtype) else {
            return;
        };
        let (s, h, d) = (19usize, 3usize, 8usize);
        let mut b = GraphBuilder::new();
        b.set_float(dtype);
        let input = |b: &mut GraphBuilder, name: &str, shape: &[usize]| {
            let x = b.input(name, DType::F32, shape).unwrap();
            b.cast(x, dtype).unwrap()
        };
        let guarded = |b: &mut GraphBuilder, scores| {
            let inf = b
                .compare_scalar(scores, Compare::Eq, f32::NEG_INFINITY)
                .unwrap();
            let live = b.logical_not(inf).unwrap();
            let any = b.any(live, &[-1], true).unwrap();
            let dead = b.logical_not(any).unwrap();
            let p = b.softmax(scores, -1).unwrap();
            let zeros = b.full_as("zeros", &[1], 0.0, dtype).unwrap();
            b.where_(dead, zeros, p).unwrap()
        };
        // ViT: [s, 3 h d] -> q, k, v [h, s, d].
        let qkv = input(&mut b, "qkv", &[s, 3 * h * d]);
        let qkv = b
            .reshape(qkv, &[s as isize, 3, h as isize, d as isize])
            .unwrap();
        let qkv = b.permute(qkv, &[1, 2, 0, 3]).unwrap();
        let [q, k, v] = [0, 1, 2].map(|i| {
            let t = b.slice(qkv, 0, i, i + 1, 1).unwrap();
            b.reshape(t, &[h as isize, s as isize, d as isize]).unwrap()
        });
        let q = b.mul_scalar(q, 0.5).unwrap();
        let kt = b.permute(k, &[0, 2, 1]).unwrap();
        let kt = b.mul_scalar(kt, 0.7).unwrap();
        let scores = b.matmul(q, kt).unwrap();
        let p = guarded(&mut b, scores);
        let y = b.matmul(p, v).unwrap();
        let vit = b.permute(y, &[1, 0, 2]).unwrap();
        // BERT and GPT-J: q, k, v [1, h, s, d], a mask [1, 1, s, s] with row 2 all -inf.
        let [q, k, v] = ["q", "k", "v"].map(|n| input(&mut b, n, &[1, h, s, d]));
        let mut mask = data(7, s * s);
        for (i, m) in mask.iter_mut().enumerate() {
            if i / s == 2 || i % 5 == 0 {
                *m = f32::NEG_INFINITY;
            }
        }
        let mask = b.constant_f32("mask", &[1, 1, s, s], &mask).unwrap();
        let mask = b.cast(mask, dtype).unwrap();
        let kt = b.permute(k, &[0, 1, 3, 2]).unwrap();
        let scores = b.matmul(q, kt).unwrap();
        // GPT-J's scale: a quotient by a one-element tensor.
        let two = b.full_as("two", &[1], 2.0, dtype).unwrap();
        let scores = b.div(scores, two).unwrap();
        let scores = b.add(scores, mask).unwrap();
        let p = guarded(&mut b, scores);
        let bert = b.matmul(p, v).unwrap();
        // Swin, as exported: 2 images of 2 windows, q, k and v sliced out of one product
        // [4, s, 3 h d], k transposed, and each viewed as [4 h, rows, cols] (windows and heads
        // merged, which no one stride steps through); a bias per head, a mask per window; the
        // result viewed back as [4, h, s, d] and transposed to [4, s, h, d].
        let (w, hd) = (4isize, (h * d) as isize);
        let wqkv = input(&mut b, "wqkv", &[4, s, 3 * h * d]);
        let wqkv = b
            .reshape(wqkv, &[w, s as isize, 3, h as isize, d as isize])
            .unwrap();
        let wqkv = b.permute(wqkv, &[2, 0, 3, 1, 4]).unwrap();
        let [q, k, v] = [0, 1, 2].map(|i| {
            let t = b.slice(wqkv, 0, i, i + 1, 1).unwrap();
            b.reshape(t, &[w, h as isize, s as isize, d as isize])
                .unwrap()
        });
        let merged = |b: &mut GraphBuilder, t, rows: usize, cols: usize| {
            b.reshape(t, &[w * h as isize, rows as isize, cols as isize])
                .unwrap()
        };
        let bias = b
            .constant_f32("bias", &[h, s, s], &data(8, h * s * s))
            .unwrap();
        let bias = b.cast(bias, dtype).unwrap();
        let wmask = b
            .constant_f32("wmask", &[2, 1, s, s], &data(9, 2 * s * s))
            .unwrap();
        let wmask = b.cast(wmask, dtype).unwrap();
        let q = b.mul_scalar(q, 0.25).unwrap();
        let q = merged(&mut b, q, s, d);
        let kt = b.permute(k, &[0, 1, 3, 2]).unwrap();
        let kt = merged(&mut b, kt, d, s);
        let v = merged(&mut b, v, s, d);
        let scores = b.matmul(q, kt).unwrap();
        let heads = [w, h as isize, s as isize, s as isize];
        let scores = b.reshape(scores, &heads).unwrap();
        let scores = b.add(scores, bias).unwrap();
        let split = [2, 2, h as isize, s as isize, s as isize];
        let scores = b.reshape(scores, &split).unwrap();
        let scores = b.add(scores, wmask).unwrap();
        let scores = b
            .reshape(scores, &[w * h as isize, s as isize, s as isize])
            .unwrap();
        let p = b.softmax(scores, -1).unwrap();
        let y = b.matmul(p, v).unwrap();
        let y = b
            .reshape(y, &[w, h as isize, s as isize, d as isize])
            .unwrap();
        let y = b.permute(y, &[0, 2, 1, 3]).unwrap();
        let swin = b.reshape(y, &[w, s as isize, hd]).unwrap();
        for o in [vit, bert, swin] {
            let o = b.cast(o, DType::F32).unwrap();
            b.output(o).unwrap();
        }
        let inputs: Vec<HostTensor> = b
            .input_specs()
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let n = spec.shape.iter().product();
                HostTensor::from_f32(spec.shape.clone(), &data(20 + i as u32, n)).unwrap()
            })
            .collect();
        let mut built = built_both(&b, &dev, |unfused| BuildOptions {
            unfused,
            ..Default::default()
        });
        let kernels = built[0].kernels();
        let count = |name: &str| kernels.iter().filter(|k| k.starts_with(name)).count();
        assert_eq!(count("Attend"), 3, "{kernels:?}");
        assert_eq!(
            count("Softmax") + count("Gemm") + count("Where"),
            0,
            "{kernels:?}"
        );
        // The permutes and slices are read through, the ViT's and the Swin's output permutes
        // written by the attention.
        assert_eq!(count("Copy"), 0, "{kernels:?}");
        let fused = assert_close_to_unfused(&mut built, &inputs, dtype, [1e-5, 2e-2]);
        // The guarded row of -inf scores is zeros.
        let bert = fused[1].to_f32().unwrap();
        assert!(bert[2 * d..3 * d].iter().all(|&v| v == 0.0), "{bert:?}");
        assert_no_validation_errors(&inst);
    }
}

/// Permutes that move no element are views, not copies: one moving dims of size 1 only
/// (a batch-first transpose at batch 1), and one undoing another across a reshape. A real
/// transpose is read through by the relu reading it (one elementwise dispatch, no copy).
/// Results are the graph's as written.
#[test]
fn permutes_that_move_nothing_are_views() {
    let test = "permutes_that_move_nothing_are_views";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[1, 5, 6]).unwrap();
    let y = b.input("y", DType::F32, &[4, 6]).unwrap();
    let moved = b.permute(x, &[1, 0, 2]).unwrap();
    let a = b.relu(moved).unwrap();
    let t = b.permute(y, &[1, 0]).unwrap();
    let t = b.reshape(t, &[6, 2, 2]).unwrap();
    let back = b.permute(t, &[1, 2, 0]).unwrap();
    let back = b.reshape(back, &[4, 6]).unwrap();
    let c = b.add(back, y).unwrap();
    let real = b.permute(y, &[1, 0]).unwrap();
    let d = b.relu(real).unwrap();
    for o in [a, c, d] {
        b.output(o).unwrap();
    }
    let (xs, ys) = (data(31, 30), data(32, 24));
    let inputs = [
        HostTensor::from_f32(vec![1, 5, 6], &xs).unwrap(),
        HostTensor::from_f32(vec![4, 6], &ys).unwrap(),
    ];
    let mut built = built_both(&b, &dev, |unfused| BuildOptions {
        unfused,
        ..Default::default()
    });
    let kernels = built[0].kernels();
    assert_eq!(kernels, ["Unary", "Binary", "Elementwise"]);
    let [fused, unfused] = built.each_mut().map(|g| g.execute(&inputs).unwrap());
    for (f, u) in fused.iter().zip(&unfused) {
        assert_eq!(f.to_f32().unwrap(), u.to_f32().unwrap());
    }
    assert_no_validation_errors(&inst);
}

#[test]
fn nodes_that_read_only_constants_run_once_at_build() {
    let test = "nodes_that_read_only_constants_run_once_at_build";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    // A shifted-window mask as exporters write it: a fill, its regions numbered by slices
    // and concats, compared and selected; then added to the scores each execution.
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, &[2, 8, 8]).unwrap();
    let zero = b.full("zero", &[8, 8], 0.0).unwrap();
    let mut rows = Vec::new();
    for (i, (start, end)) in [(0, 4), (4, 6), (6, 8)].into_iter().enumerate() {
        let band = b.slice(zero, 0, start, end, 1).unwrap();
        let count = b.add_scalar(band, i as f32).unwrap();
        rows.push(count);
    }
    let ids = b.cat(&rows, 0).unwrap();
    let left = b.slice(ids, 1, 0, 5, 1).unwrap();
    let right = b.slice(ids, 1, 5, 8, 1).unwrap();
    let right = b.mul_scalar(right, 3.0).unwrap();
    let ids = b.cat(&[left, right], 1).unwrap();
    let apart = b.compare_scalar(ids, Compare::Ne, 0.0).unwrap();
    let (neg, none) = (
        b.full("neg", &[8, 8], -100.0).unwrap(),
        b.full("none", &[8, 8], 0.0).unwrap(),
    );
    let mask = b.where_(apart, neg, none).unwrap();
    // Positions made at build, cast to floats.
    let steps = HostTensor::from_i32(vec![8], &[0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
    let steps = b.constant("steps", steps).unwrap();
    let steps = b.cast(steps, DType::F32).unwrap();
    let masked = b.add(x, mask).unwrap();
    let y = b.add(masked, steps).unwrap();
    b.output(y).unwrap();
    let xs = data(41, 128);
    let inputs = [HostTensor::from_f32(vec![2, 8, 8], &xs).unwrap()];
    let mut built = built_both(&b, &dev, |unfolded| BuildOptions {
        unfolded,
        ..Default::default()
    });
    let (folded, unfolded) = (built[0].kernels(), built[1].kernels());
    assert_eq!(
        folded,
        ["Elementwise"],
        "the two adds alone run, as one chain"
    );
    // Unfolded, the mask is made on every execution.
    assert!(
        unfolded.len() > 5 && unfolded.iter().any(|k| k == "Where"),
        "{unfolded:?}"
    );
    let [f, u] = built.each_mut().map(|g| g.execute(&inputs).unwrap());
    assert_eq!(f[0].to_f32().unwrap(), u[0].to_f32().unwrap());
    assert_no_validation_errors(&inst);
}

/// A convolution of `x` (`[1, c, h, w]`) to `out` channels, 3x3 with padding 1 and a bias,
/// then ReLU: the layer of a DenseNet or an Inception branch.
fn conv_layer(b: &mut GraphBuilder, x: TensorId, out: usize, seed: u32) -> TensorId {
    let c = b.shape(x).expect("x is a tensor")[1];
    let constant = match b.dtype(x) {
        Some(DType::F16) => GraphBuilder::constant_f16,
        _ => GraphBuilder::constant_f32,
    };
    let w = constant(b, "w", &[out, c, 3, 3], &data(seed, out * c * 9)).expect("the layer builds");
    let bias = constant(b, "b", &[out], &data(seed + 1, out)).expect("the layer builds");
    let p = Conv2d {
        padding: [1, 1],
        ..Conv2d::default()
    };
    let y = b.conv2d(x, w, Some(bias), p).expect("the layer builds");
    b.relu(y).expect("the layer builds")
}

/// Concatenations are written in place by their producers, with no copy: a DenseNet block
/// (each layer concatenates every earlier feature map, so the cats nest), after a pooling
/// transition; then Inception-style branches of different depths, an elementwise one among
/// them; then a ShuffleNet unit's halves, slices that are views. fp32 and fp16, bit-exact
/// against the build that copies.
#[test]
fn concats_are_written_in_place_by_their_producers() {
    let test = "concats_are_written_in_place_by_their_producers";
    let Some((inst, dev)) = device(test) else {
        return;
    };
    for dtype in [DType::F32, DType::F16] {
        let mut b = GraphBuilder::new();
        b.set_float(dtype);
        let x = b.input("x", DType::F32, &[1, 4, 12, 12]).unwrap();
        let x = b.cast(x, dtype).unwrap();
        let x = conv_layer(&mut b, x, 8, 1);
        let mut features = vec![b.avg_pool2d(x, Pool2d::new(2, 2)).unwrap()];
        for layer in 0..4 {
            let joined = match features.len() {
                1 => features[0],
                _ => b.cat(&features, 1).unwrap(),
            };
            features.push(conv_layer(&mut b, joined, 4, 10 + layer));
        }
        let block = b.cat(&features, 1).unwrap();
        // Branches: one convolution, two, a pool then one, and an elementwise one.
        let one = conv_layer(&mut b, block, 8, 20);
        let two = conv_layer(&mut b, block, 4, 21);
        let two = conv_layer(&mut b, two, 8, 22);
        let pooled = b.max_pool2d(block, Pool2d::new(1, 1)).unwrap();
        let pooled = conv_layer(&mut b, pooled, 4, 23);
        let scaled = b.mul_scalar(block, 0.5).unwrap();
        let branches = b.cat(&[one, two, pooled, scaled], 1).unwrap();
        // A ShuffleNet unit's halves: views of their source. The cat takes the new half in
        // place and copies the view.
        let lo = b.slice(branches, 1, 0, 22, 1).unwrap();
        let hi = b.slice(branches, 1, 22, 44, 1).unwrap();
        let hi = conv_layer(&mut b, hi, 22, 25);
        let mixed = b.cat(&[lo, hi], 1).unwrap();
        let y = conv_layer(&mut b, mixed, 4, 24);
        let y = b.cast(y, DType::F32).unwrap();
        b.output(y).unwrap();
        if let Err(e) = dev.check(&b.requirements()) {
            eprintln!("{test}: {dtype:?} skipped: {e}");
            continue;
        }
        let xs = data(40, 4 * 144);
        let inputs = [HostTensor::from_f32(vec![1, 4, 12, 12], &xs).unwrap()];
        let mut built = built_both(&b, &dev, |unfused| BuildOptions {
            unfused,
            ..Default::default()
        });
        let kernels = built[0].kernels();
        let copies = kernels.iter().filter(|k| k.starts_with("Copy")).count();
        assert_eq!(copies, 1, "{dtype:?}: {kernels:?}");
        let copied = built[1].kernels();
        assert_eq!(
            copied.iter().filter(|k| k.starts_with("Copy")).count(),
            2 + 3 + 4 + 5 + 4 + 2 + 2,
            "{copied:?}"
        );
        let [fused, unfused] = built.each_mut().map(|g| g.execute(&inputs).unwrap());
        assert_eq!(
            fused[0].to_f32().unwrap(),
            unfused[0].to_f32().unwrap(),
            "{dtype:?}"
        );
    }
    assert_no_validation_errors(&inst);
}

/// A view whose sizes overflow when multiplied is refused with a named error, not a panic
/// (sizes like a VGF RESHAPE's that fuzzing found).
#[test]
fn a_view_of_overflowing_sizes_is_an_error() {
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[8, 64]).unwrap();
    for shape in [[1isize << 40, 1 << 40, 8], [1 << 40, 1 << 40, -1]] {
        let e = g.reshape(x, &shape).unwrap_err();
        assert!(e.to_string().contains("cannot view"), "{e}");
    }
}

/// A result too large to exist (a convolution padded by 2^17, from a malformed model's
/// attributes, as fuzzing the lowering found) is refused by name, not a panic.
#[test]
fn a_result_of_more_than_2_32_elements_is_an_error() {
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[1, 1, 2, 2]).unwrap();
    let w = g.constant_f32("w", &[1, 1, 1, 1], &[1.0]).unwrap();
    let p = Conv2d {
        padding: [1 << 17, 1 << 17],
        ..Conv2d::default()
    };
    let e = g.conv2d(x, w, None, p).unwrap_err();
    assert!(e.to_string().contains("more than 2^32 elements"), "{e}");
}

/// Products along one dim and along two (TOSA's REDUCE_PRODUCT), kept as dims of 1, against
/// the host's.
#[test]
fn products_along_dims_match_the_host() {
    let Some((inst, dev)) = device("products_along_dims_match_the_host") else {
        return;
    };
    let (a, b, c) = (3usize, 4usize, 5usize);
    let x: Vec<f32> = (0..a * b * c)
        .map(|i| 0.6 + (i % 7) as f32 * 0.15)
        .collect();
    let mut g = GraphBuilder::new();
    let xi = g.input("x", DType::F32, &[a, b, c]).unwrap();
    let p1 = g.prod(xi, &[1], true).unwrap();
    let p2 = g.prod(xi, &[0, 2], false).unwrap();
    g.output(p1).unwrap();
    g.output(p2).unwrap();
    let mut graph = g.build(&dev).unwrap();
    let out = graph
        .execute(&[HostTensor::from_f32(vec![a, b, c], &x).unwrap()])
        .unwrap();
    assert_eq!(out[0].shape(), [a, 1, c]);
    assert_eq!(out[1].shape(), [b]);
    let at = |i: usize, j: usize, k: usize| f64::from(x[(i * b + j) * c + k]);
    let want1: Vec<f64> = (0..a * c)
        .map(|e| (0..b).map(|j| at(e / c, j, e % c)).product())
        .collect();
    let want2: Vec<f64> = (0..b)
        .map(|j| {
            (0..a)
                .flat_map(|i| (0..c).map(move |k| (i, k)))
                .map(|(i, k)| at(i, j, k))
                .product()
        })
        .collect();
    for (got, want) in [(&out[0], &want1), (&out[1], &want2)] {
        for (g, w) in got.to_f32().unwrap().iter().zip(want) {
            assert!((f64::from(*g) - w).abs() <= 1e-5 * w.abs(), "{g} vs {w}");
        }
    }
    assert_no_validation_errors(&inst);
}

/// A flip along a dim of declared millions, a repeat into thousands of copies, or a pad of
/// billions, is refused with a named error: each builds host-side data in proportion (an
/// index, a concatenation's parts, the pad's fill), and a file's declared sizes alone must not
/// take the host's memory (found by fuzzing VGF files).
#[test]
fn flips_repeats_and_pads_of_declared_giants_are_refused() {
    use compute_delegate::ops::{self, Arg};
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[2, 1 << 20]).unwrap();
    let flip = ops::find("aten.flip.default").unwrap();
    let e = flip
        .call(&mut g, vec![Arg::Tensor(x), Arg::Ints(vec![1])])
        .unwrap_err();
    assert!(e.to_string().contains("at most"), "{e}");
    assert!(
        flip.call(&mut g, vec![Arg::Tensor(x), Arg::Ints(vec![0])])
            .is_ok()
    );
    let y = g.input("y", DType::F32, &[1]).unwrap();
    let repeat = ops::find("aten.repeat.default").unwrap();
    let e = repeat
        .call(&mut g, vec![Arg::Tensor(y), Arg::Ints(vec![1 << 20])])
        .unwrap_err();
    assert!(e.to_string().contains("at most"), "{e}");
    let pad = ops::find("aten.constant_pad_nd.default").unwrap();
    let e = pad
        .call(
            &mut g,
            vec![Arg::Tensor(x), Arg::Ints(vec![0, 1 << 30]), Arg::Float(0.0)],
        )
        .unwrap_err();
    assert!(e.to_string().contains("2^26"), "{e}");
    // A `full` of billions (found by fuzzing ExecuTorch programs), and an arange as long.
    let full = ops::find("aten.full.default").unwrap();
    let e = full
        .call(
            &mut g,
            vec![Arg::Ints(vec![1 << 20, 1 << 20]), Arg::Float(1.0)],
        )
        .unwrap_err();
    assert!(e.to_string().contains("2^26"), "{e}");
    let arange = ops::find("aten.arange.start_step").unwrap();
    let args = vec![Arg::Float(0.0), Arg::Float(1e9), Arg::Float(1.0)];
    assert!(arange.call(&mut g, args).is_err());
    // A view of as many elements (found by fuzzing the lowering: its index is built on the
    // host), and one whose strides overflow.
    let strided = ops::find("aten.as_strided_copy.default").unwrap();
    let view =
        |size: Vec<i64>, stride: Vec<i64>| vec![Arg::Tensor(x), Arg::Ints(size), Arg::Ints(stride)];
    let e = strided
        .call(&mut g, view(vec![1 << 31, 1 << 31], vec![0, 0]))
        .unwrap_err();
    assert!(e.to_string().contains("2^26"), "{e}");
    let e = strided
        .call(&mut g, view(vec![2, 2], vec![1 << 62, 1]))
        .unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    assert!(strided.call(&mut g, view(vec![2, 2], vec![1, 2])).is_ok());
    // Sizes whose sum, and a shuffle factor whose square, overflow (found the same way).
    let split = ops::find("aten.split_with_sizes_copy.default").unwrap();
    let sizes = vec![1, i64::MAX, i64::MAX];
    let e = split
        .call(&mut g, vec![Arg::Tensor(x), Arg::Ints(sizes), Arg::Int(1)])
        .unwrap_err();
    assert!(e.to_string().contains("do not split"), "{e}");
    let shuffle = ops::find("aten.pixel_shuffle.default").unwrap();
    let z = g.input("z", DType::F32, &[1, 4, 2, 2]).unwrap();
    let e = shuffle
        .call(&mut g, vec![Arg::Tensor(z), Arg::Int(1 << 33)])
        .unwrap_err();
    assert!(e.to_string().contains("multiple"), "{e}");
    assert!(
        pad.call(
            &mut g,
            vec![Arg::Tensor(x), Arg::Ints(vec![1, 2]), Arg::Float(0.0)]
        )
        .is_ok()
    );
}

/// Floats cast to i32 truncate toward zero and saturate at both ends of i32's range (2^31 and
/// above give i32's largest, as TOSA's CAST clips).
#[test]
fn float_to_int_casts_saturate_at_both_ends() {
    let Some((inst, dev)) = device("float_to_int_casts_saturate_at_both_ends") else {
        return;
    };
    let x = [
        3e9f32,
        -3e9,
        2_147_483_648.0,
        1.5,
        -1.5,
        2_147_483_520.0,
        f32::INFINITY,
        -7.0,
    ];
    let mut g = GraphBuilder::new();
    let xi = g.input("x", DType::F32, &[x.len()]).unwrap();
    let y = g.cast(xi, DType::I32).unwrap();
    g.output(y).unwrap();
    let mut graph = g.build(&dev).unwrap();
    let out = graph
        .execute(&[HostTensor::from_f32(vec![x.len()], &x).unwrap()])
        .unwrap();
    assert_eq!(
        out[0].to_i32().unwrap(),
        [
            i32::MAX,
            i32::MIN,
            i32::MAX,
            1,
            -1,
            2_147_483_520,
            i32::MAX,
            -7
        ]
    );
    assert_no_validation_errors(&inst);
}
