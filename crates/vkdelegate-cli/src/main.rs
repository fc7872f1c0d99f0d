//! The `vkdelegate` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod devices;

#[derive(Parser)]
#[command(
    name = "vkdelegate",
    version,
    about = "Run ML models on any Vulkan GPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List every Vulkan device with its rank, capabilities, and which one would be chosen.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Show every extension and memory type.
        #[arg(long, short)]
        verbose: bool,
    },
    /// List the devices, then run a real compute dispatch on the chosen one.
    Demo,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Devices { json, verbose } => devices::run(json, verbose),
        Cmd::Demo => devices::demo(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vkdelegate: error: {e}");
            ExitCode::FAILURE
        }
    }
}
