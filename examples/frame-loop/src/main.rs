//! `frame-loop`: render a scene, run a model on each frame on the same device, present.
//! `--help` lists the options; the crate's README says more.

use std::path::PathBuf;
use std::process::ExitCode;

use ash::vk;
use clap::Parser;
use frame_loop::{Mode, Settings, Sharing};

/// Render an animated scene, run an edge-and-blur model on each frame on the same Vulkan
/// device and queue, and present the result.
#[derive(Debug, Parser)]
#[command(name = "frame-loop", version)]
struct Args {
    /// Render width in pixels.
    #[arg(long, default_value_t = 320, value_parser = clap::value_parser!(u32).range(1..=8192))]
    width: u32,
    /// Render height in pixels.
    #[arg(long, default_value_t = 240, value_parser = clap::value_parser!(u32).range(1..=8192))]
    height: u32,
    /// Draw this many frames, then stop (windowed: default until closed; offscreen: 100).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    frames: Option<u32>,
    /// Write the last presented image as a PNG (needs --frames).
    #[arg(long, requires = "frames")]
    screenshot: Option<PathBuf>,
    /// Write the last rendered scene (the model's input) as a PNG (needs --frames).
    #[arg(long, requires = "frames")]
    scene_dump: Option<PathBuf>,
    /// Run without a window or swapchain, into an offscreen image.
    #[arg(long)]
    offscreen: bool,
    /// Render only: present the scene without the model.
    #[arg(long, conflicts_with = "host_path")]
    no_model: bool,
    /// Run the model through the host: download the frame, execute on host tensors, upload.
    #[arg(long)]
    host_path: bool,
    /// Give the device to the program directly instead of through shared-runtime.
    #[arg(long)]
    direct: bool,
    /// Print the stats line at the end.
    #[arg(long)]
    stats: bool,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    let mode = if args.no_model {
        Mode::NoModel
    } else if args.host_path {
        Mode::HostPath
    } else {
        Mode::Model
    };
    let settings = Settings {
        extent: vk::Extent2D {
            width: args.width,
            height: args.height,
        },
        mode,
        sharing: if args.direct {
            Sharing::Direct
        } else {
            Sharing::Shared
        },
        screenshot: args.screenshot,
        scene_dump: args.scene_dump,
    };
    let result = if args.offscreen {
        frame_loop::run_offscreen(settings, args.frames)
    } else {
        frame_loop::run_windowed(settings, args.frames)
    };
    match result {
        Ok(line) => {
            if args.stats {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("frame-loop: error: {e}");
            ExitCode::FAILURE
        }
    }
}
