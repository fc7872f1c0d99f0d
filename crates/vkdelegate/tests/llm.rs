//! A language model exported by ExecuTorch's own export path (`fixtures/llm/tiny_llama`:
//! `export_llama --vulkan -kv --use_sdpa_with_kv_cache`, random weights) runs one token at a
//! time with its KV cache on the device: the logits after each of 16 tokens (an 8-token
//! prompt, then 8 decode steps) match PyTorch eager with its own KV cache, and greedy decoding
//! picks PyTorch's tokens (`docs/testing.md`, "Tolerances").

#![cfg(feature = "compute")]
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::path::PathBuf;

use vk_core::testing::{self, assert_no_validation_errors_of_ours};
use vk_core::{DType, HostTensor};
use vkdelegate::pte::program_builder_with_input_shapes;

fn dir() -> PathBuf {
    testing::fixture("llm").join("tiny_llama")
}

fn npy<T: npyz::Deserialize>(name: &str) -> (Vec<usize>, Vec<T>) {
    let path = dir().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    let shape = npy.shape().iter().map(|&d| d as usize).collect();
    (shape, npy.into_vec::<T>().unwrap())
}

fn long(v: i64) -> HostTensor {
    HostTensor::new(DType::I64, vec![1], v.to_le_bytes().to_vec()).unwrap()
}

#[test]
fn a_tiny_llama_decodes_token_by_token_with_its_cache_on_the_device() {
    testing::validate_every_instance();
    let bytes = std::fs::read(dir().join("model.pte")).unwrap();
    let built = program_builder_with_input_shapes(bytes.into(), None, &[vec![1, 1], vec![1]])
        .unwrap()
        .build();
    let mut program = match built {
        Ok(p) => p,
        Err(e) => return testing::skip("tiny_llama", &e.to_string()),
    };
    let (_, tokens) = npy::<i64>("tokens.npy");
    let (shape, logits) = npy::<f32>("logits.npy");
    let vocab = shape[1];
    let mut chosen = Vec::new();
    for (pos, &token) in tokens.iter().enumerate() {
        let ids = HostTensor::new(DType::I64, vec![1, 1], token.to_le_bytes().to_vec()).unwrap();
        let out = program.execute(&[ids, long(pos as i64)]).unwrap();
        let got = out[0].to_f32().unwrap();
        let want = &logits[pos * vocab..(pos + 1) * vocab];
        assert_eq!(got.len(), vocab, "position {pos}");
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (j, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * scale.max(1.0) + 1e-3 * w.abs(),
                "position {pos}, logit {j}: {g} against PyTorch's {w}"
            );
        }
        let worst = got
            .iter()
            .zip(want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        eprintln!("position {pos}: token {token}, largest error {worst:.2e} (scale {scale:.2})");
        let best = (0..vocab)
            .max_by(|&a, &b| got[a].total_cmp(&got[b]))
            .unwrap();
        chosen.push(best as i64);
    }
    // From the prompt's last token on, PyTorch's greedy choice is the next token.
    assert_eq!(&chosen[7..15], &tokens[8..16], "greedy continuation");
    let instance = program.device().instance().clone();
    drop(program);
    assert_no_validation_errors_of_ours(&instance);
}
