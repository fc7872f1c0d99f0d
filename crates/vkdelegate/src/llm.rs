//! Language models: ExecuTorch's Llama programs (`export_llama --vulkan -kv
//! --use_sdpa_with_kv_cache`, fp32 or quantized) driven a chunk of tokens or one token at a
//! time, their KV cache on the device for as long as the model is loaded.
//!
//! [`LanguageModel::prefill`] feeds a prompt and [`LanguageModel::step`] one token, each at the
//! next positions, and return the logits after the last. The program is built for each length
//! it is fed once, lazily: one token for decoding, and prompt chunks whose lengths are powers
//! of two up to the exported bound (a 13-token prompt runs as chunks of 8, 4 and 1). Every
//! build shares one [`ConstantPool`]: the weights are uploaded once, and the KV cache one
//! length writes is the one the others read. The position reaches the device as an input,
//! where the cache rows written and the causal mask are computed, so a length's recorded work
//! serves every position. [`LanguageModel::reset`] starts a new sequence (rows past the
//! position are never read, so nothing is cleared). [`BackgroundModel`] runs the steps on a
//! thread of its own, so that an engine submits work in one frame and polls for the logits in
//! a later one without blocking. [`LanguageModel::step_greedy`] and
//! [`LanguageModel::prefill_greedy`] run programs that end with an argmax on the device and
//! read back only the greedy token; [`LanguageModel::decode_greedy`] goes further and feeds
//! each greedy token back on the device, keeping the next step queued while the host reads
//! the last token, so that steps follow each other with no host work between them.
//! [`Sampler`] picks tokens: greedy at temperature 0, else from the softmax at a temperature,
//! within the top-p mass, from a seeded generator.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;

use compute_delegate::ops::{self, Arg};
use compute_delegate::{ConstantPool, GraphBuilder};
use executorch_pte::{Program as Pte, Value};
use rand::Rng;
use rand::SeedableRng;
use vk_core::{DType, Device, HostTensor};

use crate::program::{DeviceChoice, GraphStep, Program, ProgramBuilder, StepKind, StepSpec};
use crate::pte::{PteError, builder_of};

/// Why a language model cannot load or step.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The program cannot be decoded or built.
    #[error(transparent)]
    Pte(#[from] PteError),
    /// Building or running the program failed.
    #[error(transparent)]
    Program(#[from] crate::program::ProgramError),
    /// The program is not a language model this runs.
    #[error("not a language model this runs: {0}")]
    NotALanguageModel(String),
    /// The tokens fed do not fit in the positions left.
    #[error(
        "the context is full: {needed} positions asked at position {position} of {max}; reset \
         to start a new sequence"
    )]
    ContextFull {
        /// Tokens fed.
        needed: usize,
        /// The position they start at.
        position: usize,
        /// Positions of the cache.
        max: usize,
    },
    /// A prompt of no tokens.
    #[error("a prompt needs at least one token")]
    EmptyPrompt,
    /// A step was asked of a background model still running one.
    #[error("a step is still running; poll for it first")]
    Busy,
    /// The background thread stopped.
    #[error("the background thread stopped")]
    Stopped,
}

/// What the program's metadata methods return (ExecuTorch's Llama export writes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// Positions of the KV cache (`get_max_context_len`).
    pub max_context_len: usize,
    /// Logits per step (`get_vocab_size`, else the output's size).
    pub vocab_size: usize,
    /// The token a sequence starts with (`get_bos_id`), if the program says.
    pub bos: Option<i64>,
    /// Tokens that end a sequence (`get_eos_ids`, `get_eos_id`).
    pub eos: Vec<i64>,
    /// The most tokens one forward call takes (the exported bound of the tokens' length).
    pub max_chunk: usize,
}

/// A loaded language model and the position of its next token.
#[derive(Debug)]
pub struct LanguageModel {
    bytes: Arc<[u8]>,
    device: Device,
    pool: ConstantPool,
    /// The program per token count fed at once (1: decoding) and what it reads back.
    programs: BTreeMap<(usize, Readback), Program>,
    metadata: Metadata,
    position: usize,
    /// What the last run read back ([`LanguageModel::program`] is that run's program).
    last_read: Readback,
}

impl LanguageModel {
    /// Loads the `.pte` program `bytes` on the device `choice` names, built for one token;
    /// other lengths are built when first fed.
    pub fn load(bytes: Arc<[u8]>, choice: DeviceChoice) -> Result<Self, LlmError> {
        let pte = Pte::decode(&bytes).map_err(PteError::from)?;
        let metadata = metadata(&pte)?;
        let pool = ConstantPool::new();
        let program = builder_of(&pte, &bytes, None, &[vec![1, 1], vec![1]])?
            .device(choice)
            .constants(pool.clone())
            .build()?;
        let (inputs, outputs) = (program.inputs(), program.outputs());
        if inputs.len() != 2 || outputs.len() != 1 {
            return Err(LlmError::NotALanguageModel(format!(
                "{} inputs and {} outputs; tokens and input_pos in, logits out are needed",
                inputs.len(),
                outputs.len()
            )));
        }
        let vocab = outputs[0].shape.iter().product();
        let metadata = Metadata {
            vocab_size: if metadata.vocab_size == 0 {
                vocab
            } else {
                metadata.vocab_size
            },
            ..metadata
        };
        Ok(LanguageModel {
            device: program.device().clone(),
            bytes,
            pool,
            programs: BTreeMap::from([((1, Readback::Logits), program)]),
            metadata,
            position: 0,
            last_read: Readback::Logits,
        })
    }

    /// The program's metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The position the next token goes to.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The one-token program (its device, timings and profile): the greedy one when the last
    /// run was greedy and that program is built, else the one reading the logits.
    pub fn program(&mut self) -> &mut Program {
        let mut key = (1, self.last_read);
        if !self.programs.contains_key(&key) {
            key = (1, Readback::Logits);
        }
        self.programs
            .get_mut(&key)
            .expect("the one-token program is built at load and never dropped")
    }

    /// The program run for `tokens` tokens at once, if built: the greedy one where built,
    /// else the one reading the logits (for its profile: [`Program::profile`]).
    pub fn program_of(&mut self, tokens: usize) -> Option<&mut Program> {
        let key = [Readback::Greedy, Readback::Logits]
            .map(|r| (tokens, r))
            .into_iter()
            .find(|k| self.programs.contains_key(k))?;
        self.programs.get_mut(&key)
    }

    /// The token counts built so far (each once, whatever it reads back), and the constants
    /// they share (count, bytes).
    pub fn built(&self) -> (Vec<usize>, (usize, u64)) {
        let mut lengths: Vec<usize> = self.programs.keys().map(|k| k.0).collect();
        lengths.dedup();
        (lengths, self.pool.usage())
    }

    /// Feeds `token` at the next position; the logits after it.
    pub fn step(&mut self, token: i64) -> Result<Vec<f32>, LlmError> {
        self.feed(&[token])
    }

    /// Feeds `token` at the next position; the greedy next token (the first of the largest
    /// logits, as [`Sampler::greedy`] picks). The argmax runs on the device, after the
    /// model, in the same submission: only the token is read back, not the logits.
    pub fn step_greedy(&mut self, token: i64) -> Result<i64, LlmError> {
        self.feed_greedy(&[token])
    }

    /// [`LanguageModel::prefill`] reading back only the greedy next token, as
    /// [`LanguageModel::step_greedy`] does.
    pub fn prefill_greedy(&mut self, tokens: &[i64]) -> Result<i64, LlmError> {
        self.chunks(tokens, Self::feed_greedy)
    }

    /// Greedy decoding with the tokens fed back on the device: feeds `token` at the next
    /// position, then each greedy token after it, until `n` tokens are made, the context is
    /// full, or `on_token` (given each token as it is read back, in order) returns `false`.
    /// Returns the tokens made; the position advances by that count. The device picks each
    /// token after the model and writes it, and the next position, into the next step's
    /// inputs itself; one step more is queued while the host reads a token, so the device
    /// does not wait for the host between steps. A step queued past the last token read only
    /// writes cache rows past the position, which are never read.
    pub fn decode_greedy(
        &mut self,
        token: i64,
        n: usize,
        mut on_token: impl FnMut(i64) -> bool,
    ) -> Result<usize, LlmError> {
        self.room(1)?;
        let room = self.metadata.max_context_len - self.position;
        let n = n.min(room);
        let position = long_tensor(&[self.position as i64], vec![1])?;
        let inputs = [long_tensor(&[token], vec![1, 1])?, position];
        let program = self.program_for(1, Readback::FedBack)?;
        let last = std::cell::Cell::new(token);
        let mut read = |t| {
            last.set(t);
            on_token(t)
        };
        let mut made = 0;
        let fed = run_fed_back(program, &inputs, (n, room), &mut made, &mut read);
        let settled = program.settle();
        // The tokens read went into the cache whatever failed after them.
        self.position += made;
        self.last_read = Readback::FedBack;
        let stopped = fed?;
        settled?;
        // Near the end of the context, where a whole submission of steps does not fit, the
        // host feeds the last tokens.
        let mut go_on = !stopped;
        while go_on && made < n {
            let next = self.step_greedy(last.get())?;
            made += 1;
            go_on = read(next);
        }
        Ok(made)
    }

    /// Feeds `tokens` at the next positions, in chunks of powers of two; the logits after the
    /// last.
    pub fn prefill(&mut self, tokens: &[i64]) -> Result<Vec<f32>, LlmError> {
        self.chunks(tokens, Self::feed)
    }

    /// Feeds `tokens` with `feed` in chunks of powers of two; the last chunk's result.
    fn chunks<T>(
        &mut self,
        tokens: &[i64],
        feed: fn(&mut Self, &[i64]) -> Result<T, LlmError>,
    ) -> Result<T, LlmError> {
        if tokens.is_empty() {
            return Err(LlmError::EmptyPrompt);
        }
        self.room(tokens.len())?;
        let mut rest = tokens;
        loop {
            let n = chunk_len(rest.len(), self.metadata.max_chunk);
            let out = feed(self, &rest[..n])?;
            rest = &rest[n..];
            if rest.is_empty() {
                return Ok(out);
            }
        }
    }

    /// Starts a new sequence at position 0.
    pub fn reset(&mut self) {
        self.position = 0;
    }

    fn room(&self, n: usize) -> Result<(), LlmError> {
        if self.position + n > self.metadata.max_context_len {
            return Err(LlmError::ContextFull {
                needed: n,
                position: self.position,
                max: self.metadata.max_context_len,
            });
        }
        Ok(())
    }

    /// Runs the program of `tokens.len()` tokens at the current position, reading back
    /// `read`; its one output.
    fn run(&mut self, tokens: &[i64], read: Readback) -> Result<HostTensor, LlmError> {
        self.room(tokens.len())?;
        let n = tokens.len();
        let ids = long_tensor(tokens, vec![1, n])?;
        let pos = long_tensor(&[self.position as i64], vec![1])?;
        let mut out = self.program_for(n, read)?.execute(&[ids, pos])?;
        self.position += n;
        self.last_read = read;
        Ok(out.swap_remove(0))
    }

    /// [`LanguageModel::run`] reading back the greedy token after the last of `tokens`.
    fn feed_greedy(&mut self, tokens: &[i64]) -> Result<i64, LlmError> {
        let out = self.run(tokens, Readback::Greedy)?;
        out.to_i32()
            .and_then(|t| t.last().copied())
            .map(i64::from)
            .ok_or_else(|| LlmError::NotALanguageModel("the argmax is not an i32".into()))
    }

    /// [`LanguageModel::run`] reading back the logits after the last of `tokens`.
    fn feed(&mut self, tokens: &[i64]) -> Result<Vec<f32>, LlmError> {
        let out = self.run(tokens, Readback::Logits)?;
        let logits = out
            .to_f32()
            .ok_or_else(|| LlmError::NotALanguageModel("the logits are not f32".into()))?;
        // A program returning every position's logits: the last row.
        let vocab = self.metadata.vocab_size;
        Ok(match logits.len() {
            l if l > vocab && vocab > 0 => logits[l - vocab..].to_vec(),
            _ => logits,
        })
    }

    /// The program for `n` tokens at once reading back `read`, built on first use with the
    /// shared constants (and so the shared KV cache).
    fn program_for(&mut self, n: usize, read: Readback) -> Result<&mut Program, LlmError> {
        if !self.programs.contains_key(&(n, read)) {
            let pte = Pte::decode(&self.bytes).map_err(PteError::from)?;
            let mut builder = builder_of(&pte, &self.bytes, None, &[vec![1, n], vec![1]])?
                .device(DeviceChoice::Device(self.device.clone()))
                .constants(self.pool.clone());
            if read != Readback::Logits {
                builder = with_greedy_token(builder, read == Readback::FedBack)?;
            }
            self.programs.insert((n, read), builder.build()?);
        }
        Ok(self.programs.get_mut(&(n, read)).expect("inserted above"))
    }

    /// The model on a thread of its own, driven by submit and poll.
    pub fn into_background(self) -> BackgroundModel {
        let (requests, work) = mpsc::channel::<Request>();
        let (done, results) = mpsc::channel();
        let metadata = self.metadata.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut model = self;
            for request in work {
                let result = match request {
                    Request::Decode(token, n) => {
                        let stopped = || stopping.load(std::sync::atomic::Ordering::Relaxed);
                        let made = model.decode_greedy(token, n, |t| {
                            done.send(Ok(Reply::Token(t))).is_ok() && !stopped()
                        });
                        made.map(|_| Reply::Decoded)
                    }
                    Request::Step(token, Readback::Logits) => model.step(token).map(Reply::Logits),
                    Request::Step(token, _) => model.step_greedy(token).map(Reply::Token),
                    Request::Prefill(tokens, Readback::Logits) => {
                        model.prefill(&tokens).map(Reply::Logits)
                    }
                    Request::Prefill(tokens, _) => model.prefill_greedy(&tokens).map(Reply::Token),
                    Request::Reset => {
                        model.reset();
                        continue;
                    }
                };
                if done.send(result).is_err() {
                    break;
                }
            }
        });
        BackgroundModel {
            requests: Some(requests),
            results,
            pending: None,
            stop,
            metadata,
            thread: Some(thread),
        }
    }
}

/// What a program reads back after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Readback {
    /// The logits.
    Logits,
    /// The index of the largest logit after the last token, computed on the device.
    Greedy,
    /// The greedy token, which the device also feeds back as the next step's token, with the
    /// next position.
    FedBack,
}

/// The output name of the greedy programs' argmax.
const GREEDY: &str = "greedy_token";

/// The name of the fed-back programs' next position.
const NEXT_POSITION: &str = "next_position";

/// The submissions in flight of a fed-back program: the one whose tokens the host reads, and
/// the next.
const SUBMISSIONS_IN_FLIGHT: usize = 2;

/// Decode steps per submission of a fed-back program: the device stops between submissions
/// (about 14 us on an H200), not between the steps of one.
const STEPS_PER_SUBMISSION: usize = 4;

/// Overrides the decode steps per submission of [`LanguageModel::decode_greedy`] (1 to 16;
/// default 4), for tuning.
pub const STEPS_PER_SUBMISSION_ENV: &str = "VKDELEGATE_DECODE_STEPS_PER_SUBMISSION";

fn steps_per_submission() -> usize {
    std::env::var(STEPS_PER_SUBMISSION_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| (1..=16).contains(n))
        .unwrap_or(STEPS_PER_SUBMISSION)
}

/// `values` as an `i64` tensor of `shape`.
fn long_tensor(values: &[i64], shape: Vec<usize>) -> Result<HostTensor, LlmError> {
    let bytes = values.iter().flat_map(|t| t.to_le_bytes()).collect();
    HostTensor::new(DType::I64, shape, bytes)
        .map_err(|e| LlmError::NotALanguageModel(e.to_string()))
}

/// `builder` ending with the greedy token (an argmax over its logits, its first output) as
/// its one output and, where `fed_back`, the next position (its position input plus one),
/// both fed back into the next run's inputs with two runs in flight. The tail joins the
/// model's graph, so that the argmax reads its logits where they are made (an fp16 model's
/// before their widening) and the position's sum shares the model's first level.
fn with_greedy_token(builder: ProgramBuilder, fed_back: bool) -> Result<ProgramBuilder, LlmError> {
    let (inputs, outputs) = builder.io()?;
    let not_llm = |what: String| LlmError::NotALanguageModel(what);
    let logits = outputs
        .first()
        .ok_or_else(|| not_llm("the program has no output".into()))?;
    let [tokens, position] = &inputs[..] else {
        return Err(not_llm(format!(
            "{} inputs; tokens and input_pos are needed",
            inputs.len()
        )));
    };
    let tail = greedy_tail(logits, fed_back.then_some(position))
        .map_err(|e| not_llm(format!("the greedy token's graph: {e}")))?;
    let mut step = StepSpec {
        name: "greedy".into(),
        kind: StepKind::Graph(GraphStep {
            graph: Arc::new(tail),
            f16: false,
        }),
        inputs: vec![logits.name.clone()],
        outputs: vec![GREEDY.into()],
    };
    if !fed_back {
        return Ok(builder
            .step(step)
            .outputs(&[GREEDY])
            .map_steps(crate::pte::join::joined));
    }
    step.inputs.push(position.name.clone());
    step.outputs.push(NEXT_POSITION.into());
    // The next position is read by the feedback alone: the join keeps it as an output.
    let kept = |steps, outputs: &[String]| {
        let kept: Vec<String> = outputs
            .iter()
            .cloned()
            .chain([NEXT_POSITION.into()])
            .collect();
        crate::pte::join::joined(steps, &kept)
    };
    Ok(builder
        .step(step)
        .outputs(&[GREEDY])
        .map_steps(kept)
        .feed_back(GREEDY, &tokens.name)
        .feed_back(NEXT_POSITION, &position.name)
        .runs_in_flight(SUBMISSIONS_IN_FLIGHT)
        .runs_per_submission(steps_per_submission()))
}

/// The graph of the greedy token: `argmax(logits, -1)`, and `position + 1` where given.
fn greedy_tail(
    logits: &vk_core::TensorSpec,
    position: Option<&vk_core::TensorSpec>,
) -> Result<GraphBuilder, compute_delegate::Error> {
    let op = |name: &str| {
        ops::find(name)
            .ok_or_else(|| compute_delegate::Error::Graph(format!("no `{name}` op registered")))
    };
    let mut g = GraphBuilder::new();
    let x = g.input(&logits.name, logits.dtype, &logits.shape)?;
    let token = op("argmax")?.call(&mut g, vec![Arg::Tensor(x), Arg::Int(-1)])?;
    g.set_name(token[0], GREEDY)?;
    g.output(token[0])?;
    if let Some(p) = position {
        let at = g.input(&p.name, p.dtype, &p.shape)?;
        let next = op("add_scalar")?.call(&mut g, vec![Arg::Tensor(at), Arg::Float(1.0)])?;
        g.set_name(next[0], NEXT_POSITION)?;
        g.output(next[0])?;
    }
    Ok(g)
}

/// Runs the fed-back `program` from `inputs` for up to `n` tokens, keeping the next
/// submission queued, and never past `room` steps, counting the tokens read in `made` (each
/// given to `on_token`, which stops the run by returning `false`); whether it stopped. Steps
/// still in flight are left to the caller.
fn run_fed_back(
    program: &mut Program,
    inputs: &[HostTensor],
    (n, room): (usize, usize),
    made: &mut usize,
    on_token: &mut impl FnMut(i64) -> bool,
) -> Result<bool, LlmError> {
    let steps = program.runs_per_submission();
    if n == 0 || steps > room {
        return Ok(false);
    }
    program.start(Some(inputs))?;
    let mut started = steps;
    while *made < n {
        while started < n
            && started + steps <= room
            && program.running() + steps <= program.most_running()
        {
            program.start(None)?;
            started += steps;
        }
        if program.running() == 0 {
            break;
        }
        let out = program.finish()?;
        let token = out
            .first()
            .and_then(HostTensor::to_i32)
            .and_then(|t| t.first().copied())
            .ok_or_else(|| LlmError::NotALanguageModel("the argmax is not an i32".into()))?;
        *made += 1;
        if !on_token(i64::from(token)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The largest power of two at most `left` and `max` (at least 1).
fn chunk_len(left: usize, max: usize) -> usize {
    let cap = left.min(max.max(1));
    1 << (usize::BITS - 1 - cap.leading_zeros())
}

enum Request {
    Step(i64, Readback),
    Prefill(Vec<i64>, Readback),
    /// [`LanguageModel::decode_greedy`] of a token for up to this many tokens.
    Decode(i64, usize),
    Reset,
}

/// What a background step gives back.
#[derive(Debug)]
enum Reply {
    Logits(Vec<f32>),
    Token(i64),
    /// A decode's end (its tokens sent before, each as a `Token`).
    Decoded,
}

/// A [`LanguageModel`] stepping on a thread of its own: [`BackgroundModel::submit`] returns at
/// once, [`BackgroundModel::poll`] gives the logits when they are ready, never waiting;
/// [`BackgroundModel::submit_greedy`] and [`BackgroundModel::poll_token`] the same for the
/// greedy token picked on the device.
#[derive(Debug)]
pub struct BackgroundModel {
    requests: Option<mpsc::Sender<Request>>,
    results: mpsc::Receiver<Result<Reply, LlmError>>,
    /// What the running step reads back, if one runs.
    pending: Option<Readback>,
    /// Asks a running decode to stop after its next token.
    stop: Arc<std::sync::atomic::AtomicBool>,
    metadata: Metadata,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BackgroundModel {
    /// The program's metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Starts a step feeding `token`, for its logits ([`BackgroundModel::poll`]); one step at
    /// a time.
    pub fn submit(&mut self, token: i64) -> Result<(), LlmError> {
        self.start(Request::Step(token, Readback::Logits), Readback::Logits)
    }

    /// Starts feeding a prompt ([`LanguageModel::prefill`]), for the logits after it; one
    /// step at a time.
    pub fn submit_prompt(&mut self, tokens: &[i64]) -> Result<(), LlmError> {
        let r = Request::Prefill(tokens.to_vec(), Readback::Logits);
        self.start(r, Readback::Logits)
    }

    /// Starts a step feeding `token`, for the greedy token after it
    /// ([`LanguageModel::step_greedy`], [`BackgroundModel::poll_token`]); one step at a time.
    pub fn submit_greedy(&mut self, token: i64) -> Result<(), LlmError> {
        self.start(Request::Step(token, Readback::Greedy), Readback::Greedy)
    }

    /// Starts feeding a prompt, for the greedy token after it
    /// ([`LanguageModel::prefill_greedy`]); one step at a time.
    pub fn submit_prompt_greedy(&mut self, tokens: &[i64]) -> Result<(), LlmError> {
        let r = Request::Prefill(tokens.to_vec(), Readback::Greedy);
        self.start(r, Readback::Greedy)
    }

    /// Starts greedy decoding with the tokens fed back on the device
    /// ([`LanguageModel::decode_greedy`]): `token` at the next position, then up to `n`
    /// tokens, each given by [`BackgroundModel::poll_token`] as it is read back;
    /// [`BackgroundModel::stop`] ends it early. One request at a time: it runs until
    /// `poll_token` has given every token and then `None`.
    pub fn submit_decode(&mut self, token: i64, n: usize) -> Result<(), LlmError> {
        self.stop.store(false, std::sync::atomic::Ordering::Relaxed);
        self.start(Request::Decode(token, n), Readback::FedBack)
    }

    /// Asks a decode started by [`BackgroundModel::submit_decode`] to stop after the token
    /// it is reading; `poll_token` still gives the tokens made until then.
    pub fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a request runs (its results not all polled yet).
    pub fn is_busy(&self) -> bool {
        self.pending.is_some()
    }

    fn start(&mut self, r: Request, read: Readback) -> Result<(), LlmError> {
        if self.pending.is_some() {
            return Err(LlmError::Busy);
        }
        self.send(r)?;
        self.pending = Some(read);
        Ok(())
    }

    /// The logits of the step submitted by [`BackgroundModel::submit`] or
    /// [`BackgroundModel::submit_prompt`], once ready (`None`: not yet, or none submitted).
    pub fn poll(&mut self) -> Option<Result<Vec<f32>, LlmError>> {
        match self.take(Readback::Logits)? {
            Ok(Reply::Logits(l)) => Some(Ok(l)),
            Ok(_) => Some(Err(LlmError::Stopped)),
            Err(e) => Some(Err(e)),
        }
    }

    /// The greedy token of the step submitted by [`BackgroundModel::submit_greedy`] or
    /// [`BackgroundModel::submit_prompt_greedy`], or the next token of a decode
    /// ([`BackgroundModel::submit_decode`]), once ready (`None`: not yet, none submitted, or
    /// the decode has ended).
    pub fn poll_token(&mut self) -> Option<Result<i64, LlmError>> {
        if self.pending == Some(Readback::FedBack) {
            return self.decoded_token();
        }
        match self.take(Readback::Greedy)? {
            Ok(Reply::Token(t)) => Some(Ok(t)),
            Ok(_) => Some(Err(LlmError::Stopped)),
            Err(e) => Some(Err(e)),
        }
    }

    /// A running decode's next token; its end clears the request.
    fn decoded_token(&mut self) -> Option<Result<i64, LlmError>> {
        let reply = match self.results.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => {
                self.pending = None;
                return Some(Err(LlmError::Stopped));
            }
        };
        match reply {
            Ok(Reply::Token(t)) => Some(Ok(t)),
            Ok(_) => {
                self.pending = None;
                None
            }
            Err(e) => {
                self.pending = None;
                Some(Err(e))
            }
        }
    }

    /// The running step's reply if it reads back `read` and is done.
    fn take(&mut self, read: Readback) -> Option<Result<Reply, LlmError>> {
        if self.pending != Some(read) {
            return None;
        }
        match self.results.try_recv() {
            Ok(r) => {
                self.pending = None;
                Some(r)
            }
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => {
                self.pending = None;
                Some(Err(LlmError::Stopped))
            }
        }
    }

    /// Starts a new sequence once the running step, if any, is done.
    pub fn reset(&mut self) -> Result<(), LlmError> {
        self.send(Request::Reset)
    }

    fn send(&self, r: Request) -> Result<(), LlmError> {
        self.requests
            .as_ref()
            .and_then(|s| s.send(r).ok())
            .ok_or(LlmError::Stopped)
    }
}

impl Drop for BackgroundModel {
    fn drop(&mut self) {
        // Closing the channel ends the thread after its running step.
        self.requests = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The metadata methods' constants, read from the program without running it.
fn metadata(pte: &Pte<'_>) -> Result<Metadata, LlmError> {
    let ints = |method: &str| -> Vec<i64> {
        let Ok(plan) = pte.plan(method) else {
            return Vec::new();
        };
        plan.outputs
            .iter()
            .flat_map(|&v| match plan.values.get(v as usize) {
                Some(Value::Int(n)) => vec![*n],
                Some(Value::IntList(l)) => l.clone(),
                _ => Vec::new(),
            })
            .collect()
    };
    let first = |method: &str| ints(method).first().copied();
    let max_context_len = first("get_max_context_len")
        .or_else(|| first("get_max_seq_len"))
        .ok_or_else(|| {
            LlmError::NotALanguageModel("no get_max_context_len or get_max_seq_len method".into())
        })?;
    let mut eos = ints("get_eos_ids");
    eos.extend(ints("get_eos_id"));
    // The tokens input is declared at its upper bound, `[1, max]`.
    let max_chunk = pte
        .forward()
        .ok()
        .and_then(
            |plan| match plan.values.get(*plan.inputs.first()? as usize) {
                Some(Value::Tensor(t)) => t.sizes.last().map(|&d| usize::try_from(d).unwrap_or(1)),
                _ => None,
            },
        )
        .unwrap_or(1);
    Ok(Metadata {
        max_chunk,
        max_context_len: usize::try_from(max_context_len).unwrap_or(0),
        vocab_size: first("get_vocab_size").map_or(0, |v| usize::try_from(v).unwrap_or(0)),
        bos: first("get_bos_id"),
        eos,
    })
}

/// Picks tokens from logits: greedy at temperature 0, else from `softmax(logits /
/// temperature)` restricted to the smallest set of most likely tokens whose mass reaches
/// `top_p`, drawn from a generator seeded once. A step's work is linear in the vocabulary:
/// the set is found by partitioning around pivots (no sort), and the weights live in a
/// buffer kept between steps.
#[derive(Debug, Clone)]
pub struct Sampler {
    temperature: f32,
    top_p: f32,
    rng: rand::rngs::StdRng,
    /// (token, weight) of the last step.
    weights: Vec<(usize, f32)>,
}

impl Sampler {
    /// A sampler; `temperature <= 0` is greedy, `top_p` is clamped to `(0, 1]`.
    pub fn new(temperature: f32, top_p: f32, seed: u64) -> Self {
        Sampler {
            temperature,
            top_p: top_p.clamp(f32::MIN_POSITIVE, 1.0),
            rng: rand::rngs::StdRng::seed_from_u64(seed),
            weights: Vec::new(),
        }
    }

    /// The greedy sampler.
    pub fn greedy() -> Self {
        Sampler::new(0.0, 1.0, 0)
    }

    /// The next token.
    pub fn pick(&mut self, logits: &[f32]) -> i64 {
        let best = || first_largest(logits);
        if self.temperature <= 0.0 || logits.is_empty() {
            return best();
        }
        let top = logits.iter().fold(f32::MIN, |m, &v| m.max(v));
        let mut p = std::mem::take(&mut self.weights);
        p.clear();
        p.extend(
            logits
                .iter()
                .map(|&v| ((v - top) / self.temperature).exp())
                .enumerate(),
        );
        let kept = if self.top_p < 1.0 {
            nucleus(&mut p, self.top_p)
        } else {
            p.len()
        };
        let total: f32 = p[..kept].iter().map(|x| x.1).sum();
        let mut token = None;
        if total.is_finite() && total > 0.0 {
            let mut u = self.rng.r#gen::<f32>() * total;
            token = p[..kept].iter().find(|x| {
                u -= x.1;
                u < 0.0
            });
            // Rounding may leave u at or just above 0: the last token with weight.
            token = token.or_else(|| p[..kept].iter().rev().find(|x| x.1 > 0.0));
        }
        let next = token.map_or_else(best, |x| x.0 as i64);
        self.weights = p;
        next
    }
}

/// The index of the first of the largest logits, or of the first NaN: PyTorch's `argmax`, as
/// the greedy programs compute it on the device.
fn first_largest(logits: &[f32]) -> i64 {
    let mut at = 0;
    for (k, &v) in logits.iter().enumerate() {
        let best = logits[at];
        if best.is_nan() {
            break;
        }
        if v.is_nan() || v > best {
            at = k;
        }
    }
    at as i64
}

/// Reorders the weights `p` (token, weight) so that the first of them, the count returned, are
/// the likeliest tokens whose share of the total reaches `top_p` (ties by token), in an order
/// that depends on the weights alone: expected linear time, by partitioning around pivots
/// and keeping the side where the boundary lies.
fn nucleus(p: &mut [(usize, f32)], top_p: f32) -> usize {
    let total: f32 = p.iter().map(|x| x.1).sum();
    let mut need = top_p * total;
    // p[..lo] is kept; the boundary lies in p[lo..hi], everything past hi is dropped.
    let (mut lo, mut hi) = (0, p.len());
    while hi - lo > 1 {
        let part = &mut p[lo..hi];
        let n = part.len();
        let mut three = [part[0].1, part[n / 2].1, part[n - 1].1];
        three.sort_by(f32::total_cmp);
        let pivot = three[1];
        // [greater | equal | smaller] (part[..gt], part[gt..i], part[lt..]).
        let (mut gt, mut i, mut lt) = (0, 0, n);
        while i < lt {
            let w = part[i].1;
            if w > pivot {
                part.swap(gt, i);
                gt += 1;
                i += 1;
            } else if w < pivot {
                lt -= 1;
                part.swap(i, lt);
            } else {
                i += 1;
            }
        }
        let eq = lt - gt;
        let above: f32 = part[..gt].iter().map(|x| x.1).sum();
        if above >= need && gt > 0 {
            hi = lo + gt;
            continue;
        }
        let level: f32 = pivot * eq as f32;
        if above + level >= need {
            // The boundary is among the ties: the lowest tokens first.
            let ties = &mut part[gt..gt + eq];
            ties.sort_unstable_by_key(|x| x.0);
            let k = ((need - above) / pivot).ceil().clamp(1.0, eq as f32) as usize;
            return lo + gt + k;
        }
        need -= above + level;
        lo += gt + eq;
        if lo == hi {
            // Rounding: everything was needed.
            return hi;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::{Sampler, chunk_len, nucleus};

    #[test]
    fn prompts_are_cut_into_powers_of_two_up_to_the_bound() {
        let cut = |mut n: usize, max: usize| {
            let mut v = Vec::new();
            while n > 0 {
                v.push(chunk_len(n, max));
                n -= v[v.len() - 1];
            }
            v
        };
        assert_eq!(cut(13, 63), [8, 4, 1]);
        assert_eq!(cut(128, 1023), [128]);
        assert_eq!(cut(100, 32), [32, 32, 32, 4]);
        assert_eq!(cut(1, 0), [1]);
    }

    #[test]
    fn greedy_takes_the_largest_and_top_p_keeps_the_likeliest() {
        let logits = [0.1, 3.0, -1.0, 2.9];
        assert_eq!(Sampler::greedy().pick(&logits), 1);
        // The first of equals, and the first NaN, as the device's argmax.
        assert_eq!(Sampler::greedy().pick(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(Sampler::greedy().pick(&[1.0, f32::NAN, 3.0, f32::NAN]), 1);
        // A tiny top-p leaves the likeliest token alone, whatever the draw.
        let mut s = Sampler::new(1.0, 1e-6, 7);
        assert!((0..20).all(|_| s.pick(&logits) == 1));
        // The same seed draws the same tokens.
        let (mut a, mut b) = (Sampler::new(0.8, 0.9, 3), Sampler::new(0.8, 0.9, 3));
        let (x, y): (Vec<i64>, Vec<i64>) =
            (0..16).map(|_| (a.pick(&logits), b.pick(&logits))).unzip();
        assert_eq!(x, y);
        assert!(x.iter().all(|&t| t == 1 || t == 3), "{x:?}");
    }

    #[test]
    fn the_nucleus_is_the_likeliest_tokens_up_to_top_p() {
        // 5000 weights, peaked and flat mixed, and a run of ties: the nucleus found by
        // partitioning is the one a full sort finds (ties taken lowest token first).
        let mut w: Vec<(usize, f32)> = (0..5000)
            .map(|i| (i, ((i * 7919) % 5000) as f32 / 500.0))
            .map(|(i, v)| (i, (v * v / 8.0).exp()))
            .collect();
        for t in (100..5000).step_by(97) {
            w[t].1 = 2.0;
        }
        let total: f32 = w.iter().map(|x| x.1).sum();
        let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        for top_p in [1e-6, 0.1, 0.5, 0.9, 0.999] {
            let mut got = w.clone();
            let k = nucleus(&mut got, top_p);
            got.truncate(k);
            got.sort_by(order);
            let mut want = w.clone();
            want.sort_by(order);
            let mut mass = 0.0;
            let n = want
                .iter()
                .position(|x| {
                    mass += x.1;
                    mass >= top_p * total
                })
                .map_or(want.len(), |i| i + 1);
            want.truncate(n);
            assert_eq!(got.len(), want.len(), "top_p {top_p}");
            assert_eq!(got, want, "top_p {top_p}");
        }
        // Ties at the boundary: the lowest tokens.
        let mut flat: Vec<(usize, f32)> = (0..10).rev().map(|i| (i, 1.0)).collect();
        let k = nucleus(&mut flat, 0.35);
        let mut kept: Vec<usize> = flat[..k].iter().map(|x| x.0).collect();
        kept.sort();
        assert_eq!(kept, [0, 1, 2, 3]);
    }
}
