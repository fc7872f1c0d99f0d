//! `vkdelegate generate`: a language model exported by ExecuTorch (`export_llama --vulkan
//! -kv --use_sdpa_with_kv_cache`) continues a prompt. The prompt is tokenized with Hugging
//! Face's `tokenizers` (a `tokenizer.json`), fed in chunks (prefill), then tokens are sampled
//! and fed back one at a time (decode); the text streams as it is made, and the prefill and
//! decode rates follow.

use std::io::Write;
use std::time::{Duration, Instant};

use vkdelegate::llm::{LanguageModel, Sampler};
use vkdelegate::program::DeviceChoice;

use crate::GenerateArgs;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

pub fn run(r: &GenerateArgs) -> Result {
    let tokenizer = tokenizers::Tokenizer::from_file(&r.tokenizer)
        .map_err(|e| format!("{}: {e}", r.tokenizer.display()))?;
    let encoding = tokenizer
        .encode(r.prompt.as_str(), true)
        .map_err(|e| format!("tokenizing the prompt: {e}"))?;
    let bytes = std::fs::read(&r.model).map_err(|e| format!("{}: {e}", r.model.display()))?;
    let t = Instant::now();
    let mut model = LanguageModel::load(bytes.into(), DeviceChoice::Standalone)?;
    let load = t.elapsed();
    let meta = model.metadata().clone();
    let mut prompt: Vec<i64> = encoding.get_ids().iter().map(|&i| i64::from(i)).collect();
    if let Some(bos) = meta.bos {
        if prompt.first() != Some(&bos) {
            prompt.insert(0, bos);
        }
    }
    if prompt.is_empty() {
        return Err("the prompt has no tokens".into());
    }
    eprintln!(
        "{}: loaded in {:.1} ms on '{}'; context {} positions, vocabulary {}",
        r.model.display(),
        load.as_secs_f64() * 1e3,
        model.program().device().capabilities().name,
        meta.max_context_len,
        meta.vocab_size
    );
    print!("{}", r.prompt);
    std::io::stdout().flush()?;
    let t = Instant::now();
    let mut logits = model.prefill(&prompt)?;
    let prefill = t.elapsed();
    let mut sampler = Sampler::new(r.temperature, r.top_p, r.seed);
    let mut made: Vec<i64> = Vec::new();
    let mut shown = String::new();
    let t = Instant::now();
    while made.len() < r.tokens {
        let next = sampler.pick(&logits);
        made.push(next);
        let ids: Vec<u32> = made.iter().map(|&i| i as u32).collect();
        let text = tokenizer.decode(&ids, true).unwrap_or_default();
        if let Some(new) = text.get(shown.len()..) {
            print!("{new}");
            std::io::stdout().flush()?;
        }
        shown = text;
        if meta.eos.contains(&next) || model.position() >= meta.max_context_len {
            break;
        }
        logits = model.step(next)?;
    }
    let decode = t.elapsed();
    println!();
    let rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    eprintln!(
        "prefill: {} tokens in {:.1} ms ({:.1} tok/s); decode: {} tokens in {:.1} ms ({:.1} tok/s)",
        prompt.len(),
        prefill.as_secs_f64() * 1e3,
        rate(prompt.len(), prefill),
        made.len(),
        decode.as_secs_f64() * 1e3,
        rate(made.len(), decode)
    );
    eprintln!("prompt token ids: {prompt:?}");
    eprintln!("generated token ids: {made:?}");
    Ok(())
}
