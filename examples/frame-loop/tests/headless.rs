//! The frame loop end to end on lavapipe, with validation on: in a window under Xvfb and
//! offscreen, the last presented frame is compared with the CPU reference of the model applied
//! to the scene the loop rendered (its `--scene-dump`).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use frame_loop::image::read_png;
use frame_loop::model;

/// UNORM rounding on the device against `f32::round` on the host, and sums in another order:
/// at most this many levels of 255 apart.
const TOLERANCE: u8 = 2;

const WIDTH: u32 = 128;
const HEIGHT: u32 = 96;

/// Whether a missing prerequisite fails the test instead of skipping it: in CI (`CI`) or with
/// `VKDELEGATE_REQUIRE_GPU=1` (set by `cargo xtask ci`).
fn skips_are_failures() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false")
        || vk_core::testing::skips_are_failures()
}

fn skip(test: &str, reason: &str) {
    assert!(!skips_are_failures(), "{test}: cannot run in CI: {reason}");
    eprintln!("SKIPPED {test}: {reason}");
}

/// Mesa's lavapipe driver manifest, if installed (Debian: mesa-vulkan-drivers).
fn lavapipe_icd() -> Option<PathBuf> {
    let dir = Path::new("/usr/share/vulkan/icd.d");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("lvp_icd"))
        })
}

/// A scratch folder for one test, under cargo's target directory.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("frame-loop-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The example on lavapipe with validation on, writing its screenshot and scene dump into
/// `dir`; `None` after a visible skip when lavapipe is missing.
fn frame_loop(test: &str, dir: &Path, args: &[&str]) -> Option<Command> {
    let Some(icd) = lavapipe_icd() else {
        skip(
            test,
            "no lavapipe driver (apt-get install mesa-vulkan-drivers)",
        );
        return None;
    };
    let mut c = Command::new(env!("CARGO_BIN_EXE_frame-loop"));
    let (w, h) = (WIDTH.to_string(), HEIGHT.to_string());
    c.args(["--frames", "3", "--width", &w, "--height", &h, "--stats"])
        .arg("--screenshot")
        .arg(dir.join("shot.png"))
        .arg("--scene-dump")
        .arg(dir.join("scene.png"))
        .args(args)
        .env("VK_ICD_FILENAMES", &icd)
        .env("VK_DRIVER_FILES", &icd)
        .env_remove("VKDELEGATE_DEVICE_INDEX")
        .env("VKDELEGATE_VALIDATION", "1")
        .env("RUST_LOG", "warn")
        .env("XDG_RUNTIME_DIR", std::env::temp_dir());
    Some(c)
}

/// Asserts that a run succeeded, that validation reported nothing, that the engine destroyed
/// its device (vk-core let go of it), and returns its stats line.
fn assert_clean(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" ERROR vulkan]"))
        .collect();
    assert!(
        errors.is_empty(),
        "validation errors:\n{}",
        errors.join("\n")
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("stats: "))
        .unwrap_or_else(|| panic!("no stats line in:\n{stdout}"))
        .to_owned();
    assert!(line.contains("frames=3 "), "{line}");
    assert!(line.contains("validation_errors=0 "), "{line}");
    line
}

/// The screenshot against the model's CPU reference on the dumped scene.
fn assert_matches_reference(dir: &Path) {
    let (sw, sh, scene) = read_png(&dir.join("scene.png")).unwrap();
    let (w, h, shot) = read_png(&dir.join("shot.png")).unwrap();
    assert_eq!((sw, sh), (WIDTH, HEIGHT));
    assert_eq!((w, h), (WIDTH, HEIGHT));
    let reference = model::reference(&scene, w, h);
    let mut worst = (0u8, 0usize);
    for (i, (a, b)) in shot.iter().zip(&reference).enumerate() {
        let d = a.abs_diff(*b);
        if d > worst.0 {
            worst = (d, i);
        }
    }
    let (d, i) = worst;
    let px = i / 4;
    assert!(
        d <= TOLERANCE,
        "pixel ({}, {}) channel {}: {} on screen, {} in the reference (tolerance {TOLERANCE})",
        px % w as usize,
        px / w as usize,
        i % 4,
        shot[i],
        reference[i]
    );
    assert_ne!(shot, scene, "the model changed nothing");
}

/// Xvfb on a display it picks itself (`-displayfd`), stopped on drop.
struct Xvfb {
    child: Child,
    display: String,
}

impl Xvfb {
    fn start(test: &str) -> Option<Xvfb> {
        let spawned = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "640x480x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                skip(
                    test,
                    &format!("no Xvfb ({e}; Debian: apt-get install xvfb)"),
                );
                return None;
            }
        };
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        let number = line.trim();
        if read.is_err() || number.is_empty() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{test}: Xvfb printed no display number");
        }
        Some(Xvfb {
            display: format!(":{number}"),
            child,
        })
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_window_under_xvfb_presents_the_model_applied_to_the_scene() {
    let test = "a_window_under_xvfb_presents_the_model_applied_to_the_scene";
    let dir = scratch("window");
    let Some(mut cmd) = frame_loop(test, &dir, &[]) else {
        return;
    };
    let Some(xvfb) = Xvfb::start(test) else {
        return;
    };
    let out = cmd
        .env("DISPLAY", &xvfb.display)
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    drop(xvfb);
    let line = assert_clean(&out);
    assert!(line.contains("mode=model target=window"), "{line}");
    assert_matches_reference(&dir);
}

#[test]
fn offscreen_runs_the_same_loop_without_a_swapchain() {
    let test = "offscreen_runs_the_same_loop_without_a_swapchain";
    let dir = scratch("offscreen");
    let Some(mut cmd) = frame_loop(test, &dir, &["--offscreen"]) else {
        return;
    };
    let out = cmd.env_remove("DISPLAY").output().unwrap();
    let line = assert_clean(&out);
    assert!(line.contains("mode=model target=offscreen"), "{line}");
    assert_matches_reference(&dir);
}

#[test]
fn the_host_path_gives_the_same_frame() {
    let test = "the_host_path_gives_the_same_frame";
    let dir = scratch("host-path");
    let Some(mut cmd) = frame_loop(test, &dir, &["--offscreen", "--host-path", "--direct"]) else {
        return;
    };
    let out = cmd.env_remove("DISPLAY").output().unwrap();
    let line = assert_clean(&out);
    assert!(line.contains("mode=host-path"), "{line}");
    assert_matches_reference(&dir);
}

#[test]
fn without_the_model_the_scene_is_presented_as_drawn() {
    let test = "without_the_model_the_scene_is_presented_as_drawn";
    let dir = scratch("no-model");
    let Some(mut cmd) = frame_loop(test, &dir, &["--offscreen", "--no-model"]) else {
        return;
    };
    let out = cmd.env_remove("DISPLAY").output().unwrap();
    let line = assert_clean(&out);
    assert!(
        line.contains("render_to_result_ms_median=NaN model_ms_median=NaN mode=no-model"),
        "{line}"
    );
    let (_, _, scene) = read_png(&dir.join("scene.png")).unwrap();
    let (_, _, shot) = read_png(&dir.join("shot.png")).unwrap();
    assert_eq!(scene, shot);
}

#[test]
fn bad_options_are_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_frame-loop"))
        .args(["--screenshot", "x.png"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--frames"), "{err}");
}
