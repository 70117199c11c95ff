//! Mooncake-format traces: JSON Lines, one request a line, with `timestamp` (ms from the
//! start of the trace, ascending), `input_length` and `output_length` (tokens) and
//! `hash_ids` (chained prefix-block ids: entry i names blocks 0..=i).
//!
//! A *captured* trace (what the service's capture writes) has the same four keys plus the
//! whole select request the router sent (`request`) and the service's answer (`answer`),
//! so a replay can run the recorded selections again exactly as they were asked.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use switchyard::selection::wire::RequestJson;

/// The block size of a Mooncake trace when none is given and no captured request says.
pub const MOONCAKE_BLOCK_SIZE: u32 = 512;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    /// Arrival, ms from the start of the trace.
    pub timestamp: u64,
    /// Prompt length, tokens.
    pub input_length: u32,
    /// Output length, tokens.
    pub output_length: u32,
    /// Chained prefix-block ids, one per `block_size` tokens of the prompt (last one partial);
    /// a captured row's may cover only the full blocks, or none.
    pub hash_ids: Vec<u64>,
    /// The recorded request and answer, on a captured trace's rows. Boxed: the simulation
    /// walks the rows and does not read it.
    pub captured: Option<Box<Captured>>,
}

/// What a captured line records beyond the Mooncake keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Captured {
    /// The select request as the router sent it (with `workers`, never a held `table`).
    pub request: RequestJson,
    /// What the service answered.
    pub answer: RecordedAnswer,
}

/// The service's answer to a captured request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RecordedAnswer {
    /// The chosen worker.
    pub worker_id: u64,
    /// Its data-parallel rank.
    pub dp_rank: u32,
    /// The policy that decided (the fallback's name when it did).
    pub policy: String,
    /// The deciding policy's version, when it has one.
    pub version: Option<String>,
    /// Whether the fallback answered because the policy faulted.
    pub fallback: bool,
}

/// A line as written: the Mooncake keys, and a captured line's two more.
#[derive(Deserialize)]
struct Line {
    timestamp: u64,
    input_length: u32,
    output_length: u32,
    hash_ids: Vec<u64>,
    #[serde(default)]
    request: Option<serde_json::Value>,
    #[serde(default)]
    answer: Option<serde_json::Value>,
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
    /// The 1-based line of each row.
    lines: Vec<usize>,
    sha256: String,
    block_size: u32,
}

impl Trace {
    /// Parses `bytes`, keeping the first `limit` rows (all with `None`). Blank lines are
    /// skipped. Every kept row is checked: valid JSON with the four keys, timestamps not
    /// going backwards, and `len(hash_ids) == ceil(input_length / block_size)`.
    ///
    /// A captured row (one with `request`) must also carry `answer`, a request that
    /// [`RequestJson::into_parts`] accepts and that agrees with the row's Mooncake keys
    /// (`input_length` its `prompt_tokens`, `output_length` its `expected_output_tokens`
    /// or 0, `hash_ids` its `prefix_hashes` or none), and may have fewer `hash_ids` than
    /// blocks: a router hashes only the full blocks.
    ///
    /// `block_size`: tokens per block; `None` takes it from the first row, its request's
    /// when it is captured, else [`MOONCAKE_BLOCK_SIZE`]. Every captured request must
    /// use that block size. The digest always covers the whole file, so a limited replay
    /// names its source.
    pub fn parse(bytes: &[u8], block_size: Option<u32>, limit: Option<usize>) -> Result<Self, TraceError> {
        if block_size == Some(0) {
            return Err(TraceError { line: 0, message: "block size must be at least 1 token".into() });
        }
        let sha256 = hex::encode(Sha256::digest(bytes));
        let limit = limit.unwrap_or(usize::MAX);
        // The block size and where it came from, once known.
        let mut fixed = block_size.map(|b| (b, "as given".to_string()));
        let mut rows: Vec<TraceRow> = Vec::new();
        let mut lines = Vec::new();
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
            let line: Line = serde_json::from_slice(line).map_err(|e| fail(format!("{e}")))?;
            let captured = captured(&line).map_err(fail)?;
            let (block_size, source) = fixed.get_or_insert_with(|| match &captured {
                Some(c) => (c.request.block_size, format!("line {number}'s request's")),
                None => (MOONCAKE_BLOCK_SIZE, format!("Mooncake's, line {number} having no request")),
            });
            let block_size = *block_size;
            let row = TraceRow {
                timestamp: line.timestamp,
                input_length: line.input_length,
                output_length: line.output_length,
                hash_ids: line.hash_ids,
                captured: captured.map(Box::new),
            };
            let expected = row.input_length.div_ceil(block_size) as usize;
            match &row.captured {
                Some(c) if c.request.block_size != block_size => {
                    return Err(fail(format!(
                        "the request's block_size {} differs from the trace's block size {block_size} ({source})",
                        c.request.block_size
                    )));
                }
                Some(_) if row.hash_ids.len() > expected => {
                    return Err(fail(format!(
                        "{} hash_ids for input_length {} (at most ceil({} / {block_size}) = {expected})",
                        row.hash_ids.len(),
                        row.input_length,
                        row.input_length
                    )));
                }
                None if row.hash_ids.len() != expected => {
                    return Err(fail(format!(
                        "{} hash_ids for input_length {} (expected ceil({} / {block_size}) = {expected})",
                        row.hash_ids.len(),
                        row.input_length,
                        row.input_length
                    )));
                }
                _ => {}
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
            lines.push(number);
        }
        if rows.is_empty() {
            return Err(TraceError { line: 0, message: "the trace has no rows".into() });
        }
        let block_size = fixed.map_or(MOONCAKE_BLOCK_SIZE, |(b, _)| b);
        Ok(Self { rows, lines, sha256, block_size })
    }

    /// The kept rows, in file order (timestamps ascending).
    pub fn rows(&self) -> &[TraceRow] {
        &self.rows
    }

    /// The 1-based line of row `row` in the file.
    pub fn line(&self, row: usize) -> usize {
        self.lines[row]
    }

    /// Whether the trace is captured: `true` when every row carries its request, `false`
    /// when none does; a mix is an error naming the first row unlike the first.
    pub fn is_captured(&self) -> Result<bool, TraceError> {
        let first = self.rows[0].captured.is_some();
        match self.rows.iter().position(|r| r.captured.is_some() != first) {
            None => Ok(first),
            Some(row) => Err(TraceError {
                line: self.lines[row],
                message: format!(
                    "carries {} recorded request, unlike line {}: a captured trace's rows all carry one",
                    if first { "no" } else { "a" },
                    self.lines[0]
                ),
            }),
        }
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

/// A captured line's request and answer, checked; `None` for a plain Mooncake line.
fn captured(line: &Line) -> Result<Option<Captured>, String> {
    let (request, answer) = match (&line.request, &line.answer) {
        (None, None) => return Ok(None),
        (Some(request), Some(answer)) => (request, answer),
        (Some(_), None) => return Err("a `request` without its `answer`".into()),
        (None, Some(_)) => return Err("an `answer` without its `request`".into()),
    };
    let request: RequestJson =
        serde_json::from_value(request.clone()).map_err(|e| format!("request: {e}"))?;
    let answer: RecordedAnswer =
        serde_json::from_value(answer.clone()).map_err(|e| format!("answer: {e}"))?;
    // Checked now, so a replay never stops halfway on a request it cannot build.
    request.clone().into_parts().map_err(|e| format!("request: {e}"))?;
    if request.prompt_tokens != line.input_length {
        return Err(format!(
            "input_length {} is not the request's prompt_tokens {}",
            line.input_length, request.prompt_tokens
        ));
    }
    let output = request.expected_output_tokens.unwrap_or(0);
    if output != line.output_length {
        return Err(format!(
            "output_length {} is not the request's expected_output_tokens ({output})",
            line.output_length
        ));
    }
    // Empty when the capture left the hashes out.
    let hashes = request.prefix_hashes.as_deref().unwrap_or_default();
    if !line.hash_ids.is_empty() && line.hash_ids != hashes {
        return Err("hash_ids are neither the request's prefix_hashes nor empty".into());
    }
    Ok(Some(Captured { request, answer }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n";

    #[test]
    fn parses_rows_and_skips_blank_lines() {
        let text = format!("{GOOD}\n{GOOD}");
        let trace = Trace::parse(text.as_bytes(), Some(512), None).unwrap();
        assert_eq!(trace.rows().len(), 2);
        assert_eq!(trace.rows()[0].hash_ids, vec![0, 1]);
        assert_eq!(Trace::parse(text.as_bytes(), Some(512), Some(1)).unwrap().rows().len(), 1);
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
            let err = Trace::parse(text.as_bytes(), Some(512), None).unwrap_err();
            assert_eq!(err.line(), line, "{err}");
        }
        assert_eq!(Trace::parse(b"\n\n", Some(512), None).unwrap_err().line(), 0);
    }

    /// A captured line: 40 prompt tokens in blocks of 16, two full blocks hashed.
    fn captured_line(timestamp: u64, hash_ids: &str, request_extra: &str) -> String {
        format!(
            "{{\"timestamp\": {timestamp}, \"input_length\": 40, \"output_length\": 8, \"hash_ids\": {hash_ids}, \
             \"request\": {{\"prompt_tokens\": 40, \"block_size\": 16, \"expected_output_tokens\": 8, \
             \"prefix_hashes\": [3, 4], \"workers\": [{{\"id\": 1}}, {{\"id\": 2}}]{request_extra}}}, \
             \"answer\": {{\"worker_id\": 2, \"dp_rank\": 0, \"policy\": \"default\", \"version\": null, \"fallback\": false}}}}\n"
        )
    }

    #[test]
    fn captured_lines_keep_their_request_and_answer_and_set_the_block_size() {
        let text = format!("{}{}", captured_line(0, "[3, 4]", ""), captured_line(5, "[]", ", \"seed\": 9"));
        let trace = Trace::parse(text.as_bytes(), None, None).unwrap();
        assert_eq!(trace.block_size(), 16, "the requests' block size");
        assert_eq!(trace.is_captured(), Ok(true));
        let rows = trace.rows();
        // Three blocks, two hashed (a router hashes the full blocks), or none.
        assert_eq!((rows[0].hash_ids.len(), rows[1].hash_ids.len()), (2, 0));
        let second = rows[1].captured.as_ref().unwrap();
        assert_eq!(second.request.seed, 9);
        assert_eq!((second.answer.worker_id, second.answer.fallback), (2, false));
        assert_eq!(Trace::parse(text.as_bytes(), Some(16), None).unwrap().rows().len(), 2);
        assert!(Trace::parse(GOOD.as_bytes(), None, None).unwrap().rows()[0].captured.is_none());
        assert_eq!(Trace::parse(GOOD.as_bytes(), None, None).unwrap().is_captured(), Ok(false));
    }

    #[test]
    fn malformed_captured_lines_are_reported_with_their_number() {
        let good = captured_line(0, "[3, 4]", "");
        let cases = [
            // Another block size than asked for.
            (good.clone(), Some(512), 1, "block_size 16 differs from the trace's block size 512 (as given)"),
            (
                format!("{good}{}", good.replace("\"block_size\": 16", "\"block_size\": 8")),
                None,
                2,
                "line 1's request's",
            ),
            (
                format!("{good}{}", good.replace("\"prompt_tokens\"", "\"prompt_tokenz\"")),
                None,
                2,
                "request: unknown field",
            ),
            (
                format!(
                    "{good}{}",
                    good.replace("\"workers\": [{\"id\": 1}, {\"id\": 2}]", "\"table\": \"t\"")
                ),
                None,
                2,
                "held table",
            ),
            (
                format!("\n{}", good.replace(", \"fallback\": false", "")),
                None,
                2,
                "answer: missing field `fallback`",
            ),
            (good.replace("\"prompt_tokens\": 40", "\"prompt_tokens\": 41"), None, 1, "prompt_tokens 41"),
            (good.replace("\"hash_ids\": [3, 4]", "\"hash_ids\": [3, 5]"), None, 1, "prefix_hashes"),
            (good.replace("[3, 4]", "[3, 4, 5, 6]"), None, 1, "at most ceil(40 / 16) = 3"),
            (good.split(", \"answer\"").next().unwrap().to_string() + "}", None, 1, "without its `answer`"),
        ];
        for (text, block_size, line, needle) in cases {
            let err = Trace::parse(text.as_bytes(), block_size, None).unwrap_err();
            assert_eq!(err.line(), line, "{err}");
            assert!(err.message().contains(needle), "{needle}: {err}");
        }
        // A mix parses (the simulation reads the Mooncake keys alike), but is not captured.
        let plain = "{\"timestamp\": 1, \"input_length\": 20, \"output_length\": 1, \"hash_ids\": [0, 1]}";
        let mixed = format!("{good}\n{plain}\n");
        let trace = Trace::parse(mixed.as_bytes(), None, None).unwrap();
        let err = trace.is_captured().unwrap_err();
        assert_eq!(err.line(), 3, "{err}");
        assert!(err.message().contains("carries no recorded request, unlike line 1"), "{err}");
    }
}
