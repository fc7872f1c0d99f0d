//! Faults of compute graphs are errors, never aborts, hangs or leaks: a device lost at submit
//! or at wait fails every later execution of every graph on that device (and new builds) with
//! vk-core's `DeviceLost`, while graphs on another device keep working; a wait that times out
//! is a `Timeout` after which the graph runs again correctly; allocations beyond a heap fail
//! by name and leave the device usable; builds that fail half-way destroy what they made.
//! Each test drops its devices before asserting zero validation errors, so objects left at
//! `vkDestroyDevice` count as errors.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use compute_delegate::{Error, Graph, GraphBuilder};
use vk_core::testing::{self, assert_no_validation_errors};
use vk_core::{DType, Device, FaultPoint, HostTensor, Instance, vk};

fn device(test: &str) -> Option<(Instance, Device)> {
    testing::device(test, &compute_delegate::requirements())
}

/// `sigmoid(x) * 2 + 1` over `n` floats.
fn small_graph(device: &Device, n: usize) -> compute_delegate::Result<Graph> {
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[n])?;
    let s = g.sigmoid(x)?;
    let m = g.mul_scalar(s, 2.0)?;
    let y = g.add_scalar(m, 1.0)?;
    g.output(y)?;
    g.build(device)
}

fn input(n: usize, seed: f32) -> (HostTensor, Vec<f32>) {
    let v: Vec<f32> = (0..n)
        .map(|i| (i as f32 * 0.37 + seed).sin() * 4.0)
        .collect();
    let want = v.iter().map(|x| 2.0 / (1.0 + (-x).exp()) + 1.0).collect();
    (HostTensor::from_f32(vec![n], &v).unwrap(), want)
}

fn run_and_check(graph: &mut Graph, seed: f32) {
    let n = graph.inputs()[0].shape[0];
    let (x, want) = input(n, seed);
    let out = graph.execute(&[x]).unwrap();
    let got = out[0].to_f32().unwrap();
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!((a - b).abs() < 1e-5, "element {i}: {a} vs {b}");
    }
}

fn assert_lost(e: &Error, call: &str) {
    assert!(
        matches!(e, Error::Vk(vk_core::Error::DeviceLost { .. })),
        "expected DeviceLost, got {e:?}"
    );
    let text = e.to_string();
    assert!(text.contains("was lost") && text.contains(call), "{text}");
}

fn device_loss_at(point: FaultPoint, call: &str) {
    let test = format!("device_loss_at_{point:?}");
    let Some((instance, lost)) = device(&test) else {
        return;
    };
    // Another device of the same instance, which must not notice.
    let other = instance
        .select_adapter()
        .unwrap()
        .create_device(&compute_delegate::requirements())
        .unwrap();
    let mut a = small_graph(&lost, 1000).unwrap();
    let mut b = small_graph(&lost, 64).unwrap();
    let mut c = small_graph(&other, 1000).unwrap();
    run_and_check(&mut a, 0.0);
    run_and_check(&mut b, 0.0);
    run_and_check(&mut c, 0.0);

    lost.inject_fault(point, vk::Result::ERROR_DEVICE_LOST);
    let (x, _) = input(1000, 1.0);
    let e = a.execute(std::slice::from_ref(&x)).unwrap_err();
    assert_lost(&e, call);
    eprintln!("{point:?}: {e}");
    assert!(lost.lost().is_some());
    // Every later call on that device fails clearly: this graph, another, a new build.
    assert_lost(&a.execute(std::slice::from_ref(&x)).unwrap_err(), call);
    let (y, _) = input(64, 1.0);
    assert_lost(&b.execute(&[y]).unwrap_err(), call);
    assert_lost(&b.wait().unwrap_err(), call);
    match small_graph(&lost, 16) {
        Err(e) => assert_lost(&e, call),
        Ok(_) => panic!("a graph was built on a lost device"),
    }
    // The other device keeps working, before and after the lost one is torn down.
    run_and_check(&mut c, 2.0);
    drop((a, b));
    drop(lost);
    run_and_check(&mut c, 3.0);
    assert!(other.lost().is_none());
    drop(c);
    drop(other);
    assert_no_validation_errors(&instance);
}

#[test]
fn a_device_lost_at_submit_fails_every_graph_of_that_device_only() {
    device_loss_at(FaultPoint::Submit, "vkQueueSubmit");
}

#[test]
fn a_device_lost_at_wait_fails_every_graph_of_that_device_only() {
    device_loss_at(FaultPoint::Wait, "vkWaitForFences");
}

#[test]
fn a_wait_that_times_out_is_an_error_and_the_next_execution_is_correct() {
    let Some((instance, device)) = device("a_wait_that_times_out_is_an_error") else {
        return;
    };
    let mut g = small_graph(&device, 4096).unwrap();
    run_and_check(&mut g, 0.0);
    device.inject_fault(FaultPoint::Wait, vk::Result::TIMEOUT);
    let (x, _) = input(4096, 5.0);
    let e = g.execute(&[x]).unwrap_err();
    assert!(
        matches!(e, Error::Vk(vk_core::Error::Timeout { .. })),
        "expected Timeout, got {e:?}"
    );
    assert!(e.to_string().contains("did not finish within"), "{e}");
    // The timed-out work is still waited for before the next execution reuses the buffers.
    run_and_check(&mut g, 6.0);
    run_and_check(&mut g, 7.0);
    // A submit refused for memory is an error too; the next one works.
    device.inject_fault(FaultPoint::Submit, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    let (x, _) = input(4096, 8.0);
    let e = g.execute(&[x]).unwrap_err();
    assert!(e.to_string().contains("vkQueueSubmit"), "{e}");
    run_and_check(&mut g, 9.0);
    // A time-out just before the drop: the drop still waits for the work.
    device.inject_fault(FaultPoint::Wait, vk::Result::TIMEOUT);
    let (x, _) = input(4096, 10.0);
    assert!(g.execute(&[x]).is_err());
    drop(g);
    assert!(device.lost().is_none());
    drop(device);
    assert_no_validation_errors(&instance);
}

#[test]
fn a_tensor_over_the_storage_range_or_the_heap_fails_by_name() {
    const LIMIT: u64 = 64 << 20;
    let test = "a_tensor_over_the_storage_range_or_the_heap_fails_by_name";
    let Some((instance, device)) =
        testing::device_with_heap_limit(test, &compute_delegate::requirements(), LIMIT)
    else {
        return;
    };
    let mut keeps = small_graph(&device, 256).unwrap();
    // Over maxStorageBufferRange: refused before anything is allocated.
    let range = u64::from(device.capabilities().limits.max_storage_buffer_range);
    let mut g = GraphBuilder::new();
    let x = g
        .input("huge", DType::F32, &[(range / 4 + 1) as usize])
        .unwrap();
    let y = g.relu(x).unwrap();
    g.output(y).unwrap();
    let e = g.build(&device).unwrap_err();
    assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
    assert!(e.to_string().contains("'huge'"), "{e}");
    // Within the range but over the (limited) heap: the allocator refuses, by name.
    let elems = ((LIMIT + (16 << 20)).min(range) / 4) as usize;
    let mut g = GraphBuilder::new();
    let x = g.input("big", DType::F32, &[elems]).unwrap();
    let y = g.relu(x).unwrap();
    g.output(y).unwrap();
    let e = g.build(&device).unwrap_err();
    assert_allocation(&e);
    // Many medium tensors, none of which can share memory (every one is an output): more
    // than every (capped) heap together holds, so the memory runs out part-way through the
    // build, however many heaps the device has and wherever the allocator places them.
    let capped: u64 = device
        .capabilities()
        .memory
        .heaps
        .iter()
        .map(|h| h.size.min(LIMIT))
        .sum();
    let outputs = capped / (4 << 20) + 8;
    let mut g = GraphBuilder::new();
    let mut t = g.input("m", DType::F32, &[1 << 20]).unwrap();
    for _ in 0..outputs {
        t = g.relu(t).unwrap();
        g.output(t).unwrap();
    }
    let e = g.build(&device).unwrap_err();
    assert_allocation(&e);
    eprintln!("{outputs} outputs of 4 MiB on heaps capped at {LIMIT} bytes: {e}");
    // The device and the graph built before still work; so does a new small graph.
    run_and_check(&mut keeps, 1.0);
    let mut fresh = small_graph(&device, 1024).unwrap();
    run_and_check(&mut fresh, 2.0);
    drop((keeps, fresh));
    drop(device);
    assert_no_validation_errors(&instance);
}

fn assert_allocation(e: &Error) {
    match e {
        Error::Vk(vk_core::Error::Allocation { what, result, .. }) => {
            assert!(what.contains("compute graph buffer"), "{e}");
            assert_eq!(*result, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY, "{e}");
        }
        other => panic!("expected an allocation error, got {other:?}"),
    }
}

/// A chain with a weight, several intermediates, staging, inputs and outputs.
fn chain(device: &Device, force_staging: bool) -> compute_delegate::Result<Graph> {
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, &[64, 256])?;
    let w = g.constant_f32("w", &[256, 128], &vec![0.01; 256 * 128])?;
    let h = g.matmul(x, w)?;
    let h = g.relu(h)?;
    let s = g.sigmoid(h)?;
    let y = g.mul_scalar(s, 3.0)?;
    g.output(y)?;
    g.output(h)?;
    g.build_with(
        device,
        &compute_delegate::BuildOptions {
            force_staging,
            ..Default::default()
        },
    )
}

#[test]
fn builds_that_fail_part_way_and_graphs_dropped_whole_leave_nothing_behind() {
    let test = "builds_that_fail_part_way_leave_nothing_behind";
    let Some((instance, device)) = device(test) else {
        return;
    };
    // Each allocation of the build fails in turn (buffers, staging, weight staging), on any
    // device, one memory heap or several; then the build succeeds and runs correctly.
    for staging in [false, true] {
        let scan = testing::scan_allocations(
            &device,
            256,
            || chain(&device, staging),
            |e| match e {
                Error::Vk(v) => Some(v),
                _ => None,
            },
        );
        eprintln!(
            "staging {staging}: {} builds failed on allocation ({:?}), {} built",
            scan.failed.len(),
            scan.failed,
            scan.done.len()
        );
        // Every buffer of the graph (the sigmoid and scale chain's parameters one of them),
        // and with staging each staging buffer, failed by name.
        let named = |what: &str| scan.failed.iter().filter(|w| w.contains(what)).count();
        assert_eq!(named("compute graph buffer"), 6, "{:?}", scan.failed);
        if staging {
            assert_eq!(named("staging for '"), 3, "{:?}", scan.failed);
            assert_eq!(named("weight staging"), 1, "{:?}", scan.failed);
        }
        for mut g in scan.done {
            let x = HostTensor::from_f32(vec![64, 256], &vec![1.0; 64 * 256]).unwrap();
            let out = g.execute(&[x]).unwrap();
            let want = 3.0 / (1.0 + (-2.56f32).exp());
            assert!(
                out[0]
                    .to_f32()
                    .unwrap()
                    .iter()
                    .all(|v| (v - want).abs() < 1e-4)
            );
        }
    }
    drop(device);
    assert_no_validation_errors(&instance);
}

#[test]
fn a_graph_dropped_after_use_leaves_nothing_at_device_destruction() {
    let Some((instance, device)) = device("a_graph_dropped_after_use_leaves_nothing") else {
        return;
    };
    for staging in [false, true] {
        let mut g = chain(&device, staging).unwrap();
        let x = HostTensor::from_f32(vec![64, 256], &vec![0.5; 64 * 256]).unwrap();
        g.execute(&[x]).unwrap();
        // Device-side use too: submitted and dropped without a wait (drop waits).
        // SAFETY: no semaphores; inputs were written by the execution above, which finished.
        unsafe { g.submit(&[], &[]) }.unwrap();
        drop(g);
    }
    drop(device);
    assert_no_validation_errors(&instance);
}
