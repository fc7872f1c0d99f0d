//! A language model exported by ExecuTorch's own export path (`fixtures/llm/tiny_llama*`:
//! `export_llama --vulkan -kv --use_sdpa_with_kv_cache`, random weights; fp32, `-qmode 4w`
//! and `-qmode 8da4w`) runs one token at a time with its KV cache on the device: the logits
//! after each of 16 tokens (an 8-token prompt, then 8 decode steps) match PyTorch eager with
//! its own KV cache (quantized as the export quantizes), and greedy decoding picks PyTorch's
//! tokens (`docs/testing.md`, "Tolerances").

#![cfg(feature = "compute")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::PathBuf;

use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vk_core::{DType, HostTensor};
use vkdelegate::pte::program_builder_with_input_shapes;

fn dir(model: &str) -> PathBuf {
    testing::fixture("llm").join(model)
}

fn npy<T: npyz::Deserialize>(model: &str, name: &str) -> (Vec<usize>, Vec<T>) {
    let path = dir(model).join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = npy.shape().iter().map(|&d| d as usize).collect();
    (shape, npy.into_vec::<T>().unwrap())
}

/// The language model of fixture `model` on the standalone device; `None` (the skip said)
/// where it cannot load.
fn language_model(model: &str) -> Option<vkdelegate::llm::LanguageModel> {
    let bytes: std::sync::Arc<[u8]> = std::fs::read(dir(model).join("model.pte")).unwrap().into();
    let choice = vkdelegate::program::DeviceChoice::Standalone;
    match vkdelegate::llm::LanguageModel::load(bytes, choice) {
        Ok(m) => Some(m),
        Err(e) => {
            testing::skip(model, &e.to_string());
            None
        }
    }
}

/// Drops `lm`, then asserts its instance saw no validation error.
fn validated(lm: vkdelegate::llm::LanguageModel) {
    let instance = lm.device().instance().clone();
    drop(lm);
    assert_no_validation_errors_of_ours(&instance);
}

fn long(v: i64) -> HostTensor {
    HostTensor::new(DType::I64, vec![1], v.to_le_bytes().to_vec()).unwrap()
}

#[test]
fn a_tiny_llama_decodes_token_by_token_with_its_cache_on_the_device() {
    decodes_as_pytorch("tiny_llama");
}

#[test]
fn a_tiny_llama_with_4_bit_weights_decodes_as_pytorch() {
    decodes_as_pytorch("tiny_llama_4w");
}

#[test]
fn a_tiny_llama_with_4_bit_weights_and_8_bit_activations_decodes_as_pytorch() {
    decodes_as_pytorch("tiny_llama_8da4w");
}

/// Feeds `model` its reference tokens one at a time from position 0 and checks every step's
/// logits and greedy choice against PyTorch's.
fn decodes_as_pytorch(model: &str) {
    testing::validate_every_instance();
    let bytes = std::fs::read(dir(model).join("model.pte")).unwrap();
    let built = program_builder_with_input_shapes(bytes.into(), None, &[vec![1, 1], vec![1]])
        .unwrap()
        .build();
    let mut program = match built {
        Ok(p) => p,
        Err(e) => return testing::skip(model, &e.to_string()),
    };
    if model == "tiny_llama_4w" {
        // Its one-token program opens the device for every length: with the f16 features
        // where the device has them, so that a prompt's products unpacked from 4 bits may
        // multiply in fp16.
        let device = program.device();
        let has = device
            .capabilities()
            .features
            .contains(vkdelegate::compute::F16_FEATURES);
        assert_eq!(vkdelegate::compute::supports_f16(device), has);
    }
    let (_, tokens) = npy::<i64>(model, "tokens.npy");
    let (shape, logits) = npy::<f32>(model, "logits.npy");
    let vocab = shape[1];
    let mut chosen = Vec::new();
    for (pos, &token) in tokens.iter().enumerate() {
        let ids = HostTensor::new(DType::I64, vec![1, 1], token.to_le_bytes().to_vec()).unwrap();
        let out = program.execute(&[ids, long(pos as i64)]).unwrap();
        let got = out[0].to_f32().unwrap();
        let want = &logits[pos * vocab..(pos + 1) * vocab];
        assert_eq!(got.len(), vocab, "{model} position {pos}");
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        eprintln!(
            "{model} position {pos}: token {token}, largest error {worst:.2e} (scale {scale:.2})"
        );
        for (j, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * scale.max(1.0) + 1e-3 * w.abs(),
                "{model} position {pos}, logit {j}: {g} against PyTorch's {w}"
            );
        }
        let best = (0..vocab)
            .max_by(|&a, &b| got[a].total_cmp(&got[b]))
            .unwrap();
        chosen.push(best as i64);
    }
    // From the prompt's last token on, PyTorch's greedy choice is the next token.
    assert_eq!(
        &chosen[7..15],
        &tokens[8..16],
        "{model}: greedy continuation"
    );
    let product = match model {
        "tiny_llama_4w" => Some("linear_q4gsw"),
        "tiny_llama" => Some("linear"),
        _ => None,
    };
    if let Some(product) = product {
        // Its key and value products store into the caches themselves, the keys rotated.
        let ops: Vec<String> = program
            .profile()
            .unwrap()
            .into_iter()
            .map(|d| d.op)
            .collect();
        let count = |name: &str| ops.iter().filter(|o| o.starts_with(name)).count();
        let rotated = format!("{product}_rotated_into_cache");
        assert_eq!(count(&rotated), 2, "{ops:?}");
        assert_eq!(count(&format!("{product}_into_cache")), 2, "{ops:?}");
        assert_eq!(
            count("update_cache") + count("apply_rotary_emb"),
            0,
            "{ops:?}"
        );
    }
    let instance = program.device().instance().clone();
    drop(program);
    assert_no_validation_errors_of_ours(&instance);
}

/// The background model: submit returns at once, poll never waits, and the logits are those
/// of the same steps run in place.
#[test]
fn a_background_model_is_driven_by_submit_and_poll() {
    testing::validate_every_instance();
    let bytes: std::sync::Arc<[u8]> = std::fs::read(dir("tiny_llama").join("model.pte"))
        .unwrap()
        .into();
    let load = || {
        let choice = vkdelegate::program::DeviceChoice::Standalone;
        vkdelegate::llm::LanguageModel::load(bytes.clone(), choice)
    };
    let (mut inline, model) = match (load(), load()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return testing::skip("tiny_llama", &e.to_string()),
    };
    assert_eq!(inline.metadata().max_context_len, 128);
    assert_eq!(inline.metadata().vocab_size, 256);
    let mut background = model.into_background();
    assert!(background.poll().is_none(), "nothing submitted");
    for &token in &[72i64, 101, 108] {
        let want = inline.step(token).unwrap();
        background.submit(token).unwrap();
        assert!(matches!(
            background.submit(token),
            Err(vkdelegate::llm::LlmError::Busy)
        ));
        let got = loop {
            if let Some(r) = background.poll() {
                break r.unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert_eq!(got, want);
    }
    // Greedy steps: the token picked on the device, through poll_token (poll gives nothing
    // for them), as the inline model picks it.
    let want = inline.step_greedy(111).unwrap();
    background.submit_greedy(111).unwrap();
    let got = loop {
        assert!(background.poll().is_none(), "a greedy step has no logits");
        if let Some(r) = background.poll_token() {
            break r.unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert_eq!(got, want);
    assert_eq!(inline.position(), 4);
    // A decode with the tokens fed back on the device streams its tokens through poll_token,
    // as the inline model makes them; a stop ends the next one early.
    let mut want = Vec::new();
    inline
        .decode_greedy(got, 6, |t| {
            want.push(t);
            true
        })
        .unwrap();
    let streamed = |background: &mut vkdelegate::llm::BackgroundModel| {
        let mut tokens = Vec::new();
        while background.is_busy() {
            match background.poll_token() {
                Some(t) => tokens.push(t.unwrap()),
                None => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        tokens
    };
    background.submit_decode(got, 6).unwrap();
    assert!(matches!(
        background.submit_greedy(1),
        Err(vkdelegate::llm::LlmError::Busy)
    ));
    assert_eq!(streamed(&mut background), want);
    background.submit_decode(want[5], 100).unwrap();
    background.stop();
    let few = streamed(&mut background);
    assert!((1..=2).contains(&few.len()), "{few:?}");
    inline.reset();
    assert_eq!(inline.position(), 0);
}

/// Input shapes past the exported bounds (tokens `[1, 63]` at most) are refused by name.
#[test]
fn shapes_beyond_the_exported_bound_are_named() {
    let bytes = std::fs::read(dir("tiny_llama").join("model.pte")).unwrap();
    let e = match program_builder_with_input_shapes(bytes.into(), None, &[vec![1, 64], vec![1]]) {
        Ok(_) => panic!("a shape beyond the bound was taken"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("input 0") && e.contains("[1, 64]") && e.contains("[1, 63]"),
        "{e}"
    );
}

/// A prompt fed in chunks (the 8-token prompt as one chunk; then, after a reset, its first
/// token alone and the other 7 as chunks of 4, 2 and 1) gives PyTorch's logits after its last
/// token, and decoding goes on from the cache the chunks wrote: the one-token program reads
/// what the chunk programs wrote, through the constants they share.
#[test]
fn a_prompt_prefilled_in_chunks_continues_as_pytorch() {
    testing::validate_every_instance();
    let mut fp32_once = None;
    for model in ["tiny_llama", "tiny_llama_4w"] {
        let Some(mut lm) = language_model(model) else {
            return;
        };
        assert_eq!(lm.metadata().max_chunk, 63, "{model}: the exported bound");
        let (_, tokens) = npy::<i64>(model, "tokens.npy");
        let (shape, logits) = npy::<f32>(model, "logits.npy");
        let vocab = shape[1];
        let row = |p: usize| &logits[p * vocab..(p + 1) * vocab];
        let (_, (_, weights_once)) = lm.built();
        let mut pooled = Vec::new();
        for split in [&tokens[..8], &tokens[..1]] {
            lm.reset();
            let mut got = lm.prefill(split).unwrap();
            if split.len() == 1 {
                got = lm.prefill(&tokens[1..8]).unwrap();
            }
            close(model, 7, &got, row(7));
            for (pos, &token) in tokens.iter().enumerate().take(12).skip(8) {
                let got = lm.step(token).unwrap();
                close(model, pos, &got, row(pos));
            }
            pooled.push(lm.built().1.1);
        }
        let (lengths, _) = lm.built();
        assert_eq!(lengths, [1, 2, 4, 8], "{model}: the programs built");
        // Weights are uploaded once per layout: as stored for products of up to four rows
        // (the 1-, 2- and 4-token programs share them; 4-bit weights stay packed), unpacked
        // and transposed for longer chunks (the 8-token program adds that copy); only what
        // depends on the length is added besides.
        match fp32_once {
            None => {
                assert!(
                    pooled[0] < 2 * weights_once + weights_once / 2,
                    "{model}: {} bytes of constants for 1 and 8 tokens, {weights_once} for 1",
                    pooled[0]
                );
                fp32_once = Some(weights_once);
            }
            Some(f) => assert!(
                weights_once < f / 2,
                "{model}: {weights_once} bytes of constants for 1 token, {f} in fp32"
            ),
        }
        assert!(
            pooled[1] - pooled[0] < weights_once / 4,
            "{model}: the 2- and 4-token programs added {} bytes",
            pooled[1] - pooled[0]
        );
        validated(lm);
    }
}

/// Greedy decoding with the argmax on the device (`prefill_greedy`, `step_greedy`: only the
/// token is read back) continues the prompt as PyTorch's greedy choice does, for each
/// quantization; the greedy programs share the cache with the logits programs.
#[test]
fn greedy_tokens_picked_on_the_device_are_pytorchs() {
    testing::validate_every_instance();
    for model in ["tiny_llama", "tiny_llama_4w", "tiny_llama_8da4w"] {
        let Some(mut lm) = language_model(model) else {
            return;
        };
        let (_, tokens) = npy::<i64>(model, "tokens.npy");
        // The prompt through the logits programs up to its last token, then greedy.
        lm.prefill(&tokens[..7]).unwrap();
        let mut got = vec![lm.prefill_greedy(&tokens[7..8]).unwrap()];
        for &token in &tokens[8..15] {
            got.push(lm.step_greedy(token).unwrap());
        }
        assert_eq!(got, &tokens[8..16], "{model}: greedy continuation");
        let out = &lm.program().outputs()[0];
        assert_eq!(
            (out.dtype, out.shape.iter().product::<usize>()),
            (DType::I32, 1),
            "{model}: the greedy program reads back one token"
        );
        // The whole prompt greedily from a reset: the same first token.
        lm.reset();
        assert_eq!(
            lm.prefill_greedy(&tokens[..8]).unwrap(),
            tokens[8],
            "{model}"
        );
        validated(lm);
    }
}

/// A chunk of 16 tokens or more attends in blocks of queries (`attend.comp`'s causal mode over
/// the cache): its logits match PyTorch's at position 0, and, at a later position, those of
/// the same tokens fed one at a time.
#[test]
fn long_prompt_chunks_attend_in_blocks_as_token_by_token() {
    testing::validate_every_instance();
    for model in ["tiny_llama", "tiny_llama_4w"] {
        let Some(mut lm) = language_model(model) else {
            return;
        };
        let (_, tokens) = npy::<i64>(model, "tokens.npy");
        let (shape, logits) = npy::<f32>(model, "logits.npy");
        let vocab = shape[1];
        assert_eq!(tokens.len(), 16);
        let got = lm.prefill(&tokens).unwrap();
        close(model, 15, &got, &logits[15 * vocab..16 * vocab]);
        let again = lm.prefill(&tokens).unwrap();
        let profile = lm.program_of(16).unwrap().profile().unwrap();
        assert!(
            profile.iter().any(|d| d.op.contains("[Attend")),
            "{model}: the 16-token chunk attends in blocks"
        );
        lm.reset();
        lm.prefill(&tokens).unwrap();
        let mut want = Vec::new();
        for &t in &tokens {
            want = lm.step(t).unwrap();
        }
        close(model, 31, &again, &want);
        validated(lm);
    }
}

/// Greedy decoding with each token fed back on the device (`decode_greedy`: steps queued
/// ahead, no host work between them) continues the prompt as PyTorch's greedy choice does;
/// stopping early leaves the position at the tokens read, and host-fed steps continue from
/// there.
#[test]
fn greedy_tokens_fed_back_on_the_device_are_pytorchs() {
    testing::validate_every_instance();
    for model in ["tiny_llama", "tiny_llama_4w", "tiny_llama_8da4w"] {
        let Some(mut lm) = language_model(model) else {
            return;
        };
        let (_, tokens) = npy::<i64>(model, "tokens.npy");
        lm.prefill(&tokens[..7]).unwrap();
        let mut got = Vec::new();
        let made = lm
            .decode_greedy(tokens[7], 8, |t| {
                got.push(t);
                true
            })
            .unwrap();
        assert_eq!((made, &got[..]), (8, &tokens[8..16]), "{model}: fed back");
        assert_eq!(lm.position(), 15, "{model}");
        // Stopped after three tokens: the position is theirs, the queued step is dropped.
        lm.reset();
        lm.prefill(&tokens[..7]).unwrap();
        let mut first = Vec::new();
        let made = lm
            .decode_greedy(tokens[7], 8, |t| {
                first.push(t);
                first.len() < 3
            })
            .unwrap();
        assert_eq!((made, &first[..]), (3, &tokens[8..11]), "{model}: stopped");
        assert_eq!(lm.position(), 10, "{model}");
        assert_eq!(lm.step_greedy(tokens[10]).unwrap(), tokens[11], "{model}");
        if model == "tiny_llama" {
            fed_back_to_the_end_of_the_context(&mut lm, &tokens);
        }
        validated(lm);
    }
}

/// Up to the last position of the context, where a whole submission of fed-back steps no
/// longer fits and the host feeds the last ones: the tokens host-fed steps pick.
fn fed_back_to_the_end_of_the_context(lm: &mut vkdelegate::llm::LanguageModel, tokens: &[i64]) {
    let max = lm.metadata().max_context_len;
    let prompt: Vec<i64> = (0..max - 6).map(|i| tokens[i % tokens.len()]).collect();
    let (last, head) = prompt.split_last().unwrap();
    lm.reset();
    lm.prefill(head).unwrap();
    let mut want = Vec::new();
    let mut t = *last;
    while lm.position() < max {
        t = lm.step_greedy(t).unwrap();
        want.push(t);
    }
    lm.reset();
    lm.prefill(head).unwrap();
    let mut got = Vec::new();
    let made = lm
        .decode_greedy(*last, 100, |t| {
            got.push(t);
            true
        })
        .unwrap();
    assert_eq!((made, got), (7, want), "to the end of the context");
    assert_eq!(lm.position(), max);
    assert!(matches!(
        lm.decode_greedy(*last, 1, |_| true),
        Err(vkdelegate::llm::LlmError::ContextFull { .. })
    ));
}

fn close(model: &str, pos: usize, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{model} position {pos}");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * scale.max(1.0) + 1e-3 * w.abs(),
            "{model} position {pos}, logit {j}: {g} against PyTorch's {w}"
        );
    }
}
