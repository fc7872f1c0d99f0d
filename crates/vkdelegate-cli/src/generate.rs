//! `vkdelegate generate`: a language model exported by ExecuTorch (`export_llama --vulkan
//! -kv --use_sdpa_with_kv_cache`) continues a prompt. The prompt is tokenized (`tokenizer.rs`),
//! fed in chunks (prefill), then tokens are sampled and fed back one at a time (decode); the
//! text streams as it is made, and the prefill and decode rates follow. At temperature 0 the
//! device picks each token and feeds it back itself (`LanguageModel::decode_greedy`). With
//! `--bench`, it measures prefill and decode at given prompt lengths instead.

use std::io::Write;
use std::time::{Duration, Instant};

use vkdelegate::llm::{LanguageModel, Sampler};
use vkdelegate::program::{DeviceChoice, DispatchProfile};

use crate::GenerateArgs;
use crate::tokenizer::Tokenizer;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

pub fn run(r: &GenerateArgs) -> Result {
    let (Some(path), Some(text)) = (&r.tokenizer, &r.prompt) else {
        return bench(r);
    };
    if !r.bench.is_empty() {
        return bench(r);
    }
    let tokenizer = Tokenizer::from_file(path)?;
    let mut model = load(r)?;
    let meta = model.metadata().clone();
    let mut prompt = tokenizer.encode(text)?;
    if let Some(bos) = meta.bos {
        if prompt.first() != Some(&bos) {
            prompt.insert(0, bos);
        }
    }
    if prompt.is_empty() {
        return Err("the prompt has no tokens".into());
    }
    print!("{text}");
    std::io::stdout().flush()?;
    let mut sampler = sampler(r);
    let t = Instant::now();
    let mut next = feed(&mut model, &mut sampler, &prompt)?;
    let prefill = t.elapsed();
    let mut made: Vec<i64> = Vec::new();
    let mut shown = String::new();
    let mut show = |made: &[i64]| -> Result {
        let text = tokenizer.decode(made);
        if let Some(new) = text.get(shown.len()..) {
            print!("{new}");
            std::io::stdout().flush()?;
        }
        shown = text;
        Ok(())
    };
    let t = Instant::now();
    while made.len() < r.tokens {
        made.push(next);
        show(&made)?;
        if meta.eos.contains(&next) || model.position() >= meta.max_context_len {
            break;
        }
        if sampler.is_none() {
            // The device feeds each greedy token back; the host shows them as they come.
            let mut shown = Ok(());
            model.decode_greedy(next, r.tokens - made.len(), |token| {
                made.push(token);
                shown = show(&made);
                shown.is_ok() && !meta.eos.contains(&token)
            })?;
            shown?;
            break;
        }
        next = feed(&mut model, &mut sampler, &[next])?;
    }
    let decode = t.elapsed();
    println!();
    eprintln!(
        "prefill: {} tokens in {:.1} ms ({:.1} tok/s, programs built on first use \
         included); decode: {} tokens in {:.1} ms ({:.1} tok/s)",
        prompt.len(),
        ms(prefill),
        rate(prompt.len(), prefill),
        made.len(),
        ms(decode),
        rate(made.len(), decode)
    );
    eprintln!("prompt token ids: {prompt:?}");
    eprintln!("generated token ids: {made:?}");
    Ok(())
}

/// The host sampler at a temperature above 0; none at 0, where the device picks.
fn sampler(r: &GenerateArgs) -> Option<Sampler> {
    (r.temperature > 0.0).then(|| Sampler::new(r.temperature, r.top_p, r.seed))
}

/// Feeds `tokens`; the next token. Without a sampler the device computes the greedy token
/// after the model and only it is read back; with one the logits are, and it picks.
fn feed(model: &mut LanguageModel, sampler: &mut Option<Sampler>, tokens: &[i64]) -> Result<i64> {
    Ok(match sampler {
        None => model.prefill_greedy(tokens)?,
        Some(s) => s.pick(&model.prefill(tokens)?),
    })
}

fn load(r: &GenerateArgs) -> Result<LanguageModel> {
    let bytes = std::fs::read(&r.model).map_err(|e| format!("{}: {e}", r.model.display()))?;
    let t = Instant::now();
    let display = crate::progress::LoadDisplay::start(&r.model.display().to_string());
    let model = LanguageModel::load(bytes.into(), DeviceChoice::Standalone);
    display.finish();
    let model = model?;
    let meta = model.metadata();
    eprintln!(
        "{}: loaded in {:.1} ms on '{}'; context {} positions, chunks up to {} tokens, \
         vocabulary {}",
        r.model.display(),
        ms(t.elapsed()),
        model.device().capabilities().name,
        meta.max_context_len,
        meta.max_chunk,
        meta.vocab_size
    );
    Ok(model)
}

/// Prefill of each length, then `-n` decode steps after it: warm-up runs (the first builds the
/// programs; then at least half a second of them, so that the GPU's clocks have ramped up),
/// then `--repeat` timed runs, each from position 0.
fn bench(r: &GenerateArgs) -> Result {
    if r.bench.is_empty() {
        return Err("give --tokenizer and --prompt, or --bench LENGTHS".into());
    }
    let mut model = load(r)?;
    let mut sampler = sampler(r);
    let vocab = model.metadata().vocab_size.max(1) as u64;
    let mut state = r.seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut draw = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) % vocab) as i64
    };
    println!("prompt  measure   tokens       min    median       max  (tok/s; ms)");
    for &n in &r.bench {
        let prompt: Vec<i64> = (0..n.max(1)).map(|_| draw()).collect();
        let (mut pre, mut dec, mut fed) = (Vec::new(), Vec::new(), Vec::new());
        let mut fed_step = None;
        // Right after a load of some seconds an NVIDIA H100's first prefills ran at a third of
        // their speed.
        let mut warm_since: Option<Instant> = None;
        while pre.len() < r.repeat.max(1) {
            let timed = warm_since.is_some_and(|t| t.elapsed() >= crate::bench::WARM_UP);
            if sampler.is_none() {
                // Greedy with the tokens fed back on the device.
                model.reset();
                let next = feed(&mut model, &mut sampler, &prompt)?;
                let t = Instant::now();
                let made = model.decode_greedy(next, r.tokens, |_| true)?;
                if timed {
                    // As long as `r.tokens` steps would have taken (a full context makes fewer).
                    fed.push(t.elapsed().mul_f64(r.tokens as f64 / made.max(1) as f64));
                }
                fed_step = Some(model.program().last_timings().clone());
            }
            model.reset();
            let t = Instant::now();
            let mut next = feed(&mut model, &mut sampler, &prompt)?;
            let p = t.elapsed();
            let t = Instant::now();
            for _ in 0..r.tokens {
                next = feed(&mut model, &mut sampler, &[next])?;
            }
            if timed {
                pre.push(p);
                dec.push(t.elapsed());
            }
            warm_since.get_or_insert_with(Instant::now);
        }
        row(n, "prefill", prompt.len(), &mut pre);
        if fed.is_empty() {
            row(n, "decode", r.tokens, &mut dec);
        } else {
            row(n, "decode", r.tokens, &mut fed);
            row(n, "host-fed", r.tokens, &mut dec);
        }
        if let Some(t) = fed_step.filter(|t| t.device_span > Duration::ZERO) {
            let idle = t.device_idle.unwrap_or_default();
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            let steps: Vec<String> = t
                .steps
                .iter()
                .map(|(n, d)| format!("{n} {:.1}", us(*d)))
                .collect();
            println!(
                "        last fed-back step: {:.1} us on the device, copies included ({}); the \
                 device idle {:.1} us before it",
                us(t.device_span),
                steps.join(", "),
                us(idle)
            );
        }
        step_split(&mut model);
    }
    if r.profile {
        profile(&mut model)?;
        if let Some(&n) = r.bench.iter().max() {
            // The largest chunk that prompt ran in: a power of two up to the bound.
            let bound = model.metadata().max_chunk.max(1);
            let chunk = 1 << (usize::BITS - 1 - n.min(bound).max(1).leading_zeros());
            prefill_profile(&mut model, chunk)?;
        }
    }
    let (lengths, (count, bytes)) = model.built();
    eprintln!(
        "programs built for {lengths:?} tokens at once; {count} constants, {:.1} MiB, shared",
        bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// The last host-fed decode step's wall time against its steps' device time (timestamps
/// around each step of the program, where the queue has them): what the host adds to a token
/// when it feeds each token itself.
fn step_split(model: &mut LanguageModel) {
    let t = model.program().last_timings();
    let device: Duration = t.steps.iter().map(|s| s.1).sum();
    if device > Duration::ZERO {
        println!(
            "        last decode step: {:.1} us from host to host, {:.1} us on the device",
            t.total.as_secs_f64() * 1e6,
            device.as_secs_f64() * 1e6
        );
    }
}

/// The device time of one decode step (the one-token program, as last run), summed per op.
fn profile(model: &mut LanguageModel) -> Result {
    let position = model.position();
    let rows = model.program().profile()?;
    let total: Duration = rows.iter().map(|d| d.time).sum();
    let ops = costliest(&rows, |d| d.op.clone());
    let barriers = rows.iter().filter(|d| d.barrier_before).count();
    println!(
        "decode step at position {position}: {} dispatches, {barriers} barriers, {:.3} ms of \
         device time",
        rows.len(),
        ms(total)
    );
    for (op, (n, t)) in ops {
        println!("  {op:32} {n:5} {:9.3} ms", ms(t));
    }
    // The same by the shape each writes and its work groups: which products cost most.
    let shapes = costliest(&rows, |d| {
        format!("{} {:?} groups {}", d.op, d.shape, d.groups[0])
    });
    println!("by shape (the costliest 16; us each):");
    for (what, (n, t)) in shapes.into_iter().take(16) {
        let each = t.as_secs_f64() * 1e6 / n.max(1) as f64;
        println!("  {what:60} {n:5} {:9.3} ms {each:8.1}", ms(t));
    }
    // The step's opening in order (the position prelude, then the first layer), each
    // dispatch's time with `|` where a barrier precedes it.
    println!("the first 24 dispatches in order (us; | a barrier before):");
    for d in rows.iter().take(24) {
        let mark = if d.barrier_before { '|' } else { ' ' };
        let each = d.time.as_secs_f64() * 1e6;
        println!(
            "  {mark} {:44} {:24} {each:8.1}",
            &d.op,
            format!("{:?}", d.shape)
        );
    }
    Ok(())
}

/// The device time of the `n`-token prefill program (as last run), summed per op: the
/// costliest 12.
fn prefill_profile(model: &mut LanguageModel, n: usize) -> Result {
    let Some(program) = model.program_of(n) else {
        return Ok(());
    };
    let rows = program.profile()?;
    let total: Duration = rows.iter().map(|d| d.time).sum();
    println!(
        "prefill of {n} tokens: {} dispatches, {:.3} ms of device time; the costliest:",
        rows.len(),
        ms(total)
    );
    let ops = costliest(&rows, |d| format!("{} {:?}", d.op, d.shape));
    for (what, (k, t)) in ops.into_iter().take(12) {
        println!("  {what:64} {k:5} {:9.3} ms", ms(t));
    }
    Ok(())
}

/// The dispatches' count and summed time per `key`, the costliest first.
fn costliest(
    rows: &[DispatchProfile],
    key: impl Fn(&DispatchProfile) -> String,
) -> Vec<(String, (usize, Duration))> {
    let mut per: std::collections::BTreeMap<String, (usize, Duration)> = Default::default();
    for d in rows {
        let e = per.entry(key(d)).or_default();
        e.0 += 1;
        e.1 += d.time;
    }
    let mut out: Vec<_> = per.into_iter().collect();
    out.sort_by_key(|o| std::cmp::Reverse(o.1.1));
    out
}

/// One line: rates of the fastest, median and slowest run (and the median in ms).
fn row(n: usize, what: &str, tokens: usize, times: &mut [Duration]) {
    times.sort();
    let Some(&median) = times.get(times.len() / 2) else {
        return;
    };
    let (fast, slow) = (times[0], times[times.len() - 1]);
    println!(
        "{n:6}  {what:8} {tokens:7} {:9.1} {:9.1} {:9.1}  ({:.2} ms)",
        rate(tokens, slow),
        rate(tokens, median),
        rate(tokens, fast),
        ms(median)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}
