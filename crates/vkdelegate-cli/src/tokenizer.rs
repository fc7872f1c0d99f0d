//! The tokenizers `generate` reads: Hugging Face's `tokenizer.json` (the `tokenizers` crate),
//! and the tiktoken-style `tokenizer.model` of Llama 3 that ExecuTorch's Llama runner takes
//! (`tiktoken-rs`): one `base64-token rank` line per token, then Llama 3's 256 special tokens
//! numbered after them, split by Llama 3's pattern.

use std::collections::HashMap;
use std::path::Path;

use base64::Engine;

/// Llama 3's pre-tokenizer pattern.
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's named special tokens, numbered from the end of the base vocabulary; the rest of
/// the 256 are `<|reserved_special_token_K|>`.
const LLAMA3_SPECIAL: [&str; 11] = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
];
const SPECIALS: usize = 256;

/// A tokenizer of either format.
pub enum Tokenizer {
    /// A Hugging Face `tokenizer.json`.
    HuggingFace(Box<tokenizers::Tokenizer>),
    /// A tiktoken-style `tokenizer.model`.
    Tiktoken(Box<tiktoken_rs::CoreBPE>),
}

type Result<T> = std::result::Result<T, String>;

impl Tokenizer {
    /// Reads `path`: JSON is Hugging Face's format, anything else the tiktoken one.
    pub fn from_file(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let json = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        let made = if json {
            tokenizers::Tokenizer::from_bytes(&bytes)
                .map(|t| Tokenizer::HuggingFace(Box::new(t)))
                .map_err(|e| e.to_string())
        } else {
            tiktoken(&bytes).map(|t| Tokenizer::Tiktoken(Box::new(t)))
        };
        made.map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The token ids of `text` (special tokens written in it are taken as such).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        match self {
            Tokenizer::HuggingFace(t) => t
                .encode(text, true)
                .map(|e| e.get_ids().iter().map(|&i| i64::from(i)).collect())
                .map_err(|e| format!("tokenizing the prompt: {e}")),
            Tokenizer::Tiktoken(t) => Ok(t
                .encode_with_special_tokens(text)
                .into_iter()
                .map(i64::from)
                .collect()),
        }
    }

    /// The text of `ids` (bytes that are not UTF-8 shown as U+FFFD; unknown ids as nothing).
    pub fn decode(&self, ids: &[i64]) -> String {
        let ids: Vec<u32> = ids.iter().filter_map(|&i| u32::try_from(i).ok()).collect();
        match self {
            Tokenizer::HuggingFace(t) => t.decode(&ids, true).unwrap_or_default(),
            Tokenizer::Tiktoken(t) => {
                String::from_utf8_lossy(&t.decode_bytes(&ids).unwrap_or_default()).into_owned()
            }
        }
    }
}

/// A tiktoken-style model: `base64 rank` lines, ranks distinct.
fn tiktoken(bytes: &[u8]) -> Result<tiktoken_rs::CoreBPE> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not text: {e}"))?;
    let mut encoder: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut ranks = std::collections::HashSet::new();
    for (k, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |why: &str| format!("line {}: {why}: '{}'", k + 1, line.trim());
        let mut parts = line.split_whitespace();
        let (Some(token), Some(rank), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("not 'base64-token rank'"));
        };
        let token = base64::engine::general_purpose::STANDARD
            .decode(token)
            .map_err(|e| bad(&format!("the token is not base64 ({e})")))?;
        let rank: u32 = rank.parse().map_err(|_| bad("the rank is not a number"))?;
        if !ranks.insert(rank) || encoder.insert(token, rank).is_some() {
            return Err(bad("a token or rank given twice"));
        }
    }
    if encoder.is_empty() {
        return Err("no tokens".into());
    }
    let base = ranks.iter().max().map_or(0, |&m| m + 1);
    let special: HashMap<String, u32> = (0..SPECIALS)
        .map(|i| {
            let name = LLAMA3_SPECIAL.get(i).map_or_else(
                || {
                    format!(
                        "<|reserved_special_token_{}|>",
                        i - LLAMA3_SPECIAL.len() + 3
                    )
                },
                |s| (*s).to_owned(),
            );
            (name, base + i as u32)
        })
        .collect();
    tiktoken_rs::CoreBPE::new(
        encoder.into_iter().collect(),
        special.into_iter().collect(),
        LLAMA3_PATTERN,
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::tiktoken;

    #[test]
    fn tiktoken_files_name_their_bad_lines() {
        // "a" = YQ==, "b" = Yg==, "ab" = YWI=
        let bpe = tiktoken(b"YQ== 0\nYg== 1\nYWI= 2\n").unwrap();
        assert_eq!(bpe.encode_with_special_tokens("ab"), [2]);
        assert_eq!(
            bpe.encode_with_special_tokens("<|begin_of_text|>ba"),
            [3, 1, 0]
        );
        assert_eq!(
            bpe.encode_with_special_tokens("<|reserved_special_token_3|>"),
            [3 + 11]
        );
        for (file, want) in [
            (
                &b"YQ== 0\nYQ== 1\n"[..],
                "line 2: a token or rank given twice",
            ),
            (b"YQ== 0\nYg== 0\n", "line 2: a token or rank given twice"),
            (b"YQ== zero\n", "line 1: the rank is not a number"),
            (b"!!! 0\n", "line 1: the token is not base64"),
            (b"YQ==\n", "line 1: not 'base64-token rank'"),
            (b"\n", "no tokens"),
        ] {
            let e = tiktoken(file).err().unwrap();
            assert!(e.starts_with(want), "{e}");
        }
    }
}
