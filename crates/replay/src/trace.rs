//! Mooncake-format traces: JSON Lines, one request a line, with `timestamp` (ms from the
//! start of the trace, ascending), `input_length` and `output_length` (tokens) and
//! `hash_ids` (chained prefix-block ids: entry i names blocks 0..=i).

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TraceRow {
    /// Arrival, ms from the start of the trace.
    pub timestamp: u64,
    /// Prompt length, tokens.
    pub input_length: u32,
    /// Output length, tokens.
    pub output_length: u32,
    /// Chained prefix-block ids, one per `block_size` tokens of the prompt (last one partial).
    pub hash_ids: Vec<u64>,
}

/// A trace line that cannot be replayed, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TraceError {
    line: usize,
    message: String,
}

impl TraceError {
    /// The 1-based line number of the offending line (0: the file as a whole).
    pub fn line(&self) -> usize {
        self.line
    }
    /// What is wrong with the line.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The rows of a trace, and the sha256 of the whole file (its identity in reports).
#[derive(Debug, Clone)]
pub struct Trace {
    rows: Vec<TraceRow>,
    sha256: String,
    block_size: u32,
}

impl Trace {
    /// Parses `bytes`, keeping the first `limit` rows (all with `None`). Blank lines are
    /// skipped. Every kept row is checked: valid JSON with the four keys, timestamps not
    /// going backwards, and `len(hash_ids) == ceil(input_length / block_size)`.
    /// The digest always covers the whole file, so a limited replay names its source.
    pub fn parse(bytes: &[u8], block_size: u32, limit: Option<usize>) -> Result<Self, TraceError> {
        if block_size == 0 {
            return Err(TraceError { line: 0, message: "block size must be at least 1 token".into() });
        }
        let sha256 = hex::encode(Sha256::digest(bytes));
        let limit = limit.unwrap_or(usize::MAX);
        let mut rows: Vec<TraceRow> = Vec::new();
        for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if rows.len() >= limit {
                break;
            }
            let number = index + 1;
            let fail = |message: String| TraceError { line: number, message };
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let row: TraceRow = serde_json::from_slice(line).map_err(|e| fail(format!("{e}")))?;
            let expected = row.input_length.div_ceil(block_size) as usize;
            if row.hash_ids.len() != expected {
                return Err(fail(format!(
                    "{} hash_ids for input_length {} (expected ceil({} / {block_size}) = {expected})",
                    row.hash_ids.len(),
                    row.input_length,
                    row.input_length
                )));
            }
            if let Some(last) = rows.last()
                && row.timestamp < last.timestamp
            {
                return Err(fail(format!(
                    "timestamp {} is earlier than the previous row's {}",
                    row.timestamp, last.timestamp
                )));
            }
            rows.push(row);
        }
        if rows.is_empty() {
            return Err(TraceError { line: 0, message: "the trace has no rows".into() });
        }
        Ok(Self { rows, sha256, block_size })
    }

    /// The kept rows, in file order (timestamps ascending).
    pub fn rows(&self) -> &[TraceRow] {
        &self.rows
    }

    /// sha256 of the whole file, hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Tokens per block the `hash_ids` were cut at.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n";

    #[test]
    fn parses_rows_and_skips_blank_lines() {
        let text = format!("{GOOD}\n{GOOD}");
        let trace = Trace::parse(text.as_bytes(), 512, None).unwrap();
        assert_eq!(trace.rows().len(), 2);
        assert_eq!(trace.rows()[0].hash_ids, vec![0, 1]);
        assert_eq!(Trace::parse(text.as_bytes(), 512, Some(1)).unwrap().rows().len(), 1);
    }

    #[test]
    fn malformed_lines_are_reported_with_their_number() {
        let cases = [
            (format!("{GOOD}{GOOD}{{\"timestamp\": 1,"), 3),
            (format!("{GOOD}{{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1}}"), 2),
            (
                format!(
                    "{GOOD}{{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}}"
                ),
                2,
            ),
            (
                format!(
                    "{{\"timestamp\": 9, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [4]}}\n{GOOD}"
                ),
                2,
            ),
            (
                format!(
                    "{GOOD}\n{{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [4]}}"
                ),
                3,
            ),
        ];
        for (text, line) in cases {
            let err = Trace::parse(text.as_bytes(), 512, None).unwrap_err();
            assert_eq!(err.line(), line, "{err}");
        }
        assert_eq!(Trace::parse(b"\n\n", 512, None).unwrap_err().line(), 0);
    }
}
