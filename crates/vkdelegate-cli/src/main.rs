//! The `vkdelegate` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// `run --vgf-path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VgfPathArg {
    /// Natively where the file's graph lowers, else through the data-graph extension.
    Auto,
    /// On the compute delegate's kernels.
    Native,
    /// Through `VK_ARM_data_graph`.
    DataGraph,
}

mod bench;
mod demo;
mod devices;
#[cfg(feature = "compute")]
mod generate;
mod hostio;
mod inspect;
#[cfg(any(feature = "vgf", feature = "compute"))]
mod inspect_pte;
mod npy;
#[cfg(any(feature = "vgf", feature = "compute"))]
mod progress;
mod run;
#[cfg(feature = "compute")]
mod tokenizer;
#[cfg(any(feature = "vgf", feature = "compute"))]
mod zoo;

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
    /// Describe a VGF file (inputs, outputs, segments, constants; `--verbose`: every resource
    /// and constant) or an ExecuTorch program (plans, instructions, delegates with their ops,
    /// what this build cannot run).
    Inspect {
        /// The `.vgf` or `.pte` file.
        model: PathBuf,
        /// Print JSON (every fact the decoder knows, laid out like Arm's `vgf_dump`).
        #[arg(long)]
        json: bool,
        /// Also list every resource and every constant.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Run a VGF file, an ExecuTorch program (.pte) or a program file (.toml) on the best
    /// device.
    Run {
        /// A `.vgf` model, a `.pte` ExecuTorch program or a `.toml` program.
        model: PathBuf,
        /// The `.pte` execution plan to run (default `forward`).
        #[arg(long)]
        method: Option<String>,
        /// Input `.npy` files: `FILE` in input order, or `NAME=FILE` for programs.
        #[arg(long = "input", short = 'i')]
        inputs: Vec<String>,
        /// Where to write `output_0.npy`, `output_1.npy`, ...
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// Executions to time.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Programs: pass tensors between steps through host memory instead of on the device.
        #[arg(long)]
        host_hand_off: bool,
        /// How VGF files run: `native` on the compute delegate's kernels (no ARM extension),
        /// `data-graph` through VK_ARM_data_graph, `auto` natively where every operator of
        /// the file's graph lowers.
        #[arg(long, value_enum, default_value_t = VgfPathArg::Auto)]
        vgf_path: VgfPathArg,
        /// Write the device timeline of one execution (every dispatch: op, kernel, shape, GPU
        /// time) to this file as Chrome trace JSON, which Perfetto opens.
        #[arg(long)]
        trace: Option<PathBuf>,
    },
    /// Benchmarks, as ratios to baselines measured in the same run on the same device.
    Bench {
        /// Small shapes (seconds on a CPU driver).
        #[arg(long)]
        quick: bool,
        /// Only compute ops whose name contains this (and the host I/O rows only where it is
        /// part of `host_io`: `--filter host`).
        #[arg(long)]
        filter: Option<String>,
        /// Also time these VGF files (and Arm's scenario-runner on them, when given).
        #[arg(long)]
        vgf: Vec<PathBuf>,
        /// Time this program file with device and host hand-off.
        #[arg(long)]
        program: Option<PathBuf>,
        /// Time these ExecuTorch programs (load, host to host, device time per delegate).
        #[arg(long)]
        pte: Vec<PathBuf>,
        /// Arm's scenario-runner binary (or VKDELEGATE_SCENARIO_RUNNER).
        #[arg(long)]
        scenario_runner: Option<PathBuf>,
        /// Repetitions for VGF and program timings.
        #[arg(long, default_value_t = 20)]
        repeat: usize,
        /// Skip the compute op benchmarks.
        #[arg(long)]
        no_ops: bool,
        /// Skip the host I/O rows (after the op rows).
        #[arg(long)]
        no_host_io: bool,
        /// Print every dispatch of each `.pte` program's device profile.
        #[arg(long)]
        dispatches: bool,
        /// Also write the figures as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The demo: list the devices, run a compute dispatch, and run the example program
    /// (avg_pool2d on VGF -> sigmoid on compute -> x*x + 0.25 on VGF) against a CPU reference.
    Demo {
        /// The repository root (holding `examples/` and `fixtures/`).
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Continue a prompt with a language model exported by ExecuTorch (`export_llama --vulkan
    /// -kv --use_sdpa_with_kv_cache`): tokenize it (`tokenizer.json`), feed it, sample and
    /// stream the text, and print the prefill and decode rates.
    Generate(GenerateArgs),
    /// Run a model zoo: every folder holding `model.pte`, its `input_<i>.npy` and PyTorch's
    /// `expected_output_<i>.npy`, loaded, run and compared; one table (model, load, run, max
    /// error, pass). Fails when any model fails.
    Zoo {
        /// Zoo folders (or model folders).
        #[arg(default_value = "fixtures/zoo")]
        dirs: Vec<PathBuf>,
        /// Only models whose folder name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Executions per model (the run time is their median, host to host).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Also time the same networks with PyTorch on this machine's CUDA GPU (eager and
        /// CUDA-graph replay, host to host), in the same run: the Python to run
        /// `fixtures/tools/torch_zoo.py` with (found beside the zoo folder).
        #[arg(long, value_name = "PYTHON")]
        torch: Option<String>,
    },
}

/// `generate`'s arguments.
#[derive(clap::Args)]
struct GenerateArgs {
    /// The `.pte` program.
    model: PathBuf,
    /// A Hugging Face `tokenizer.json`, or a Llama 3 tiktoken-style `tokenizer.model`.
    #[arg(long, required_unless_present = "bench")]
    tokenizer: Option<PathBuf>,
    /// The text to continue.
    #[arg(long, required_unless_present = "bench")]
    prompt: Option<String>,
    /// Measures instead: for each prompt length given (e.g. `128,512`), the prefill of that
    /// many tokens and the decode of `-n` tokens after it, min/median/max of `--repeat` runs
    /// after half a second of warm-up runs (token ids drawn from the seed; no tokenizer needed).
    #[arg(long, value_delimiter = ',', value_name = "LENGTHS")]
    bench: Vec<usize>,
    /// Runs per bench measure.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// With `--bench`: then the device time of one decode step, per op.
    #[arg(long, requires = "bench")]
    profile: bool,
    /// Tokens to generate at most.
    #[arg(short = 'n', long = "tokens", default_value_t = 32)]
    tokens: usize,
    /// 0 picks the likeliest token, on the device (only the token is read back); above 0,
    /// the logits are read back and tokens drawn from their softmax at this temperature
    /// (with `--bench` too, which measures that path then).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Draw only from the likeliest tokens whose probabilities add up to this.
    #[arg(long = "top-p", default_value_t = 1.0)]
    top_p: f32,
    /// The seed of the draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// `inspect` of a `.pte` program or a VGF file.
fn inspect_any(
    model: &std::path::Path,
    json: bool,
    verbose: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(any(feature = "vgf", feature = "compute"))]
    if model.extension().and_then(|e| e.to_str()) == Some("pte") {
        return inspect_pte::run(model, json);
    }
    inspect::run(model, json, verbose)
}

#[cfg(any(feature = "vgf", feature = "compute"))]
fn zoo_run(
    dirs: &[PathBuf],
    filter: Option<&str>,
    repeat: usize,
    torch: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    zoo::run(dirs, filter, repeat, torch)
}

#[cfg(feature = "compute")]
fn generate_run(args: &GenerateArgs) -> Result<(), Box<dyn std::error::Error>> {
    generate::run(args)
}

#[cfg(not(feature = "compute"))]
fn generate_run(_: &GenerateArgs) -> Result<(), Box<dyn std::error::Error>> {
    Err("generating text needs the `compute` feature, which this build lacks".into())
}

#[cfg(not(any(feature = "vgf", feature = "compute")))]
fn zoo_run(
    _: &[PathBuf],
    _: Option<&str>,
    _: usize,
    _: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    Err("running a zoo needs the `compute` feature, which this build lacks".into())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Devices { json, verbose } => devices::run(json, verbose),
        Cmd::Inspect {
            model,
            json,
            verbose,
        } => inspect_any(&model, json, verbose),
        Cmd::Run {
            model,
            method,
            inputs,
            output_dir,
            repeat,
            host_hand_off,
            vgf_path,
            trace,
        } => run::run(
            &model,
            method.as_deref(),
            &inputs,
            [output_dir.as_deref(), trace.as_deref()],
            repeat,
            (host_hand_off, vgf_path),
        ),
        Cmd::Bench {
            quick,
            filter,
            vgf,
            program,
            pte,
            scenario_runner,
            repeat,
            no_ops,
            no_host_io,
            dispatches,
            json,
        } => bench::run(&bench::BenchArgs {
            quick,
            filter,
            vgf,
            program,
            pte,
            scenario_runner,
            repeat,
            json,
            skip_ops: no_ops,
            skip_host_io: no_host_io,
            dispatches,
        }),
        Cmd::Demo { root } => demo::run(&root),
        Cmd::Zoo {
            dirs,
            filter,
            repeat,
            torch,
        } => zoo_run(&dirs, filter.as_deref(), repeat, torch.as_deref()),
        Cmd::Generate(args) => generate_run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vkdelegate: error: {e}");
            ExitCode::FAILURE
        }
    }
}
