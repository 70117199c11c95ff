//! Docs that cannot drift: every code block of README.md and the two authors' guides
//! (docs/writing-policies.md, docs/writing-policies-c.md) is run, written and built, or
//! its flags checked, by the real `switchyard` and the real toolchains, so a renamed API,
//! field or flag fails here.
//!
//! A page is run top to bottom in a fresh scratch directory outside the workspace, as an
//! author would follow it. What each block is, by its fence and the HTML comment on the
//! line before it (invisible when the page is rendered):
//!
//! - ` ```sh `: a script, run by `bash -euo pipefail` in the current directory; a `cd`
//!   carries over to the next block.
//! - `<!-- doc-test: file=PATH -->` then any fence: written to PATH (from the current
//!   directory); a later block naming the same file appends to it.
//! - `<!-- doc-test: output -->` then any fence: each of its lines must be in what the
//!   previous `sh` block printed (stdout), `…` standing for anything.
//! - ` ```text ` whose first line is `$ command`: the command is run (it may fail) and
//!   each further line must be in its stdout and stderr, `…` standing for anything.
//! - `<!-- doc-test: no-run -->` then ` ```sh `: not run (it installs, or it is the whole
//!   test suite); each command's flags are checked instead: `switchyard …` must parse
//!   with `--help` appended (`cargo run … -- ARGS` checks ARGS so), and any other
//!   program's `PROGRAM SUBCOMMAND --help` must name each `--flag` it is given.
//! - any other ` ```text `: a diagram or prose, not checked.
//!
//! Any other block fails the test: a block is run, built, checked or declared prose.
//!
//! The environment is an author's, not cargo's: cargo's variables (`RUSTUP_TOOLCHAIN`,
//! which would force the pinned toolchain, `CARGO_*`, `RUSTFLAGS`) are removed and the
//! PATH loses rustup's toolchain directories, so the scratch crate runs on the machine's
//! default toolchain until its own `rust-toolchain.toml` names another (and, with
//! `RUSTUP_AUTO_INSTALL=0`, only once the page's `rustup toolchain install` installed it).
//! What the pages' `no-run` blocks do is stood in for: `switchyard` on the PATH is the
//! binary under test, `switchyard/` beside the scratch crates is this checkout, and
//! `clang-19` is the test guests' C compiler (clang-19, clang or zig). The scratch crates
//! build into `<target>/guide` (`CARGO_TARGET_DIR`), so dependencies are built once.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Command, Output};

/// This checkout.
fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A code block of a page: its fence's language, the `doc-test:` marker before it, its
/// body, and its first line's number (for messages).
#[derive(Debug)]
struct Block {
    lang: String,
    marker: Option<String>,
    body: String,
    line: usize,
}

/// The fenced blocks of a Markdown page (fences at the start of a line).
fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = page.lines().enumerate();
    let mut previous = "";
    while let Some((n, line)) = lines.next() {
        if let Some(lang) = line.strip_prefix("```") {
            let marker = previous
                .trim()
                .strip_prefix("<!-- doc-test:")
                .and_then(|m| m.strip_suffix("-->"))
                .map(|m| m.trim().to_string());
            let mut body = String::new();
            for (_, line) in lines.by_ref() {
                if line.starts_with("```") {
                    break;
                }
                body.push_str(line);
                body.push('\n');
            }
            out.push(Block { lang: lang.trim().to_string(), marker, body, line: n + 1 });
            previous = "";
        } else {
            previous = line;
        }
    }
    out
}

/// One page being followed: where it stands and what it printed last.
struct Run {
    page: String,
    /// The scratch root (outside the workspace).
    root: PathBuf,
    cwd: PathBuf,
    /// The author's environment (see the module's comment).
    env: Vec<(String, String)>,
    written: HashSet<PathBuf>,
    last_stdout: String,
}

impl Run {
    /// A fresh scratch directory for `page` with this checkout beside it as `switchyard/`,
    /// and a PATH whose `switchyard` (and `clang-19`, with `c`) are the test's.
    fn new(page: &str, c: bool) -> Run {
        let root = std::env::temp_dir().join(format!(
            "switchyard-guide-{}-{}",
            std::process::id(),
            page.replace(['/', '.'], "-")
        ));
        assert!(!root.starts_with(checkout()), "the scratch directory is outside the workspace");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(".bin")).unwrap();
        std::os::unix::fs::symlink(checkout(), root.join("switchyard")).unwrap();
        let bin = root.join(".bin");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_switchyard"), bin.join("switchyard")).unwrap();
        if c {
            // The page installs clang-19 with apt (a no-run block): the test guests'
            // compiler stands in for it.
            let toolchain = switchyard_guest_build::c::toolchain().expect("the test guests' C toolchain");
            let clang = toolchain.clang();
            let mut words = vec![clang.get_program().to_os_string()];
            words.extend(clang.get_args().map(|a| a.to_os_string()));
            words.push(toolchain.link_arg());
            let quoted: Vec<String> =
                words.iter().map(|w| format!("'{}'", w.to_string_lossy().replace('\'', "'\\''"))).collect();
            let shim = bin.join("clang-19");
            std::fs::write(&shim, format!("#!/bin/sh\nexec {} \"$@\"\n", quoted.join(" "))).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let keep = [
            "HOME",
            "USER",
            "LANG",
            "LC_ALL",
            "TMPDIR",
            "RUSTUP_HOME",
            "CARGO_HOME",
            "RUSTUP_AUTO_INSTALL",
            "SWITCHYARD_CLANG",
            "SWITCHYARD_WASM_LD",
            "http_proxy",
            "https_proxy",
            "no_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "NO_PROXY",
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
        ];
        let mut env: Vec<(String, String)> =
            std::env::vars().filter(|(k, _)| keep.contains(&k.as_str())).collect();
        // Under rustup, cargo runs the tests with the pinned toolchain's directories on
        // the PATH; an author's shell has only rustup's proxies.
        let path = std::env::var_os("PATH").unwrap_or_default();
        let dirs = std::iter::once(bin)
            .chain(std::env::split_paths(&path).filter(|d| !d.to_string_lossy().contains("/toolchains/")));
        env.push(("PATH".into(), std::env::join_paths(dirs).unwrap().to_string_lossy().into_owned()));
        // `<target>/<profile>/switchyard`: the scratch crates build beside it, in `<target>/guide`.
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_switchyard"));
        let target = bin.ancestors().nth(2).expect("the binary lives in <target>/<profile>").join("guide");
        env.push(("CARGO_TARGET_DIR".into(), target.display().to_string()));
        Run {
            page: page.to_string(),
            cwd: root.clone(),
            root,
            env,
            written: HashSet::new(),
            last_stdout: String::new(),
        }
    }

    /// A command in the author's environment, in the current directory.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear().envs(self.env.iter().map(|(k, v)| (k, v))).current_dir(&self.cwd);
        cmd
    }

    /// `bash -c script` in the author's environment.
    fn bash(&self, script: &str) -> Output {
        self.command("bash").args(["-c", script]).output().expect("runs bash")
    }

    /// Follows every block of the page; an error names the block and says what failed.
    fn follow(&mut self, text: &str) -> Result<(), String> {
        for block in blocks(text) {
            self.block(&block).map_err(|e| {
                format!(
                    "{}:{} (```{}):\n{}\n--- the block ---\n{}",
                    self.page, block.line, block.lang, e, block.body
                )
            })?;
        }
        Ok(())
    }

    fn block(&mut self, block: &Block) -> Result<(), String> {
        match (block.lang.as_str(), block.marker.as_deref()) {
            (_, Some(m)) if m.starts_with("file=") => {
                let path = self.cwd.join(&m["file=".len()..]);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                let mut text = if self.written.contains(&path) {
                    std::fs::read_to_string(&path).unwrap() + "\n"
                } else {
                    String::new()
                };
                text.push_str(&block.body);
                std::fs::write(&path, text).unwrap();
                self.written.insert(path);
                Ok(())
            }
            (_, Some("output")) => expect_lines(&self.last_stdout, &block.body),
            ("sh", Some("no-run")) => self.check_flags(&block.body),
            ("sh", None) => self.run_script(&block.body),
            ("text", None) if block.body.starts_with("$ ") => {
                let (command, expected) = block.body.split_once('\n').unwrap_or((&block.body, ""));
                let out = self.bash(&command[2..]);
                let printed = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                expect_lines(&printed, expected)
            }
            ("text", None) => Ok(()),
            (lang, marker) => Err(format!(
                "a ```{lang} block with marker {marker:?} is neither run, written, checked nor prose: mark it \
                 (see tests/all/guide.rs)"
            )),
        }
    }

    /// Runs a `sh` block, then moves to the directory it ended in.
    fn run_script(&mut self, body: &str) -> Result<(), String> {
        let state = self.root.join(".cwd");
        let script = format!("set -euo pipefail\n{body}\npwd > '{}'\n", state.display());
        let out = self.bash(&script);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(format!(
                "failed ({}) in {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
                out.status,
                self.cwd.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        self.cwd = PathBuf::from(std::fs::read_to_string(&state).unwrap().trim());
        self.last_stdout = stdout;
        Ok(())
    }

    /// The `no-run` check: each command's flags parse (see the module's comment).
    fn check_flags(&self, body: &str) -> Result<(), String> {
        let joined = body.replace("\\\n", " ");
        for line in joined.lines() {
            let line = line.split(" #").next().unwrap();
            if line.trim_start().starts_with('#') {
                continue;
            }
            for command in line.split("&&") {
                let words = split_words(command);
                let words: Vec<&str> =
                    words.iter().map(String::as_str).skip_while(|w| w.contains('=')).collect();
                match words.as_slice() {
                    [] => {}
                    ["switchyard", args @ ..] => self.check_switchyard(args)?,
                    ["cargo", "run", args @ ..] => {
                        let split = args.iter().position(|&a| a == "--").unwrap_or(args.len());
                        self.check_help(&["cargo", "run"], &args[..split])?;
                        if split < args.len() {
                            self.check_switchyard(&args[split + 1..])?;
                        }
                    }
                    [program, sub, args @ ..] if !sub.starts_with('-') => {
                        self.check_help(&[program, sub], args)?
                    }
                    [program, args @ ..] => self.check_help(&[program], args)?,
                }
            }
        }
        Ok(())
    }

    /// `switchyard ARGS --help` parses (clap reads every flag before it answers `--help`).
    fn check_switchyard(&self, args: &[&str]) -> Result<(), String> {
        let out = self.command("switchyard").args(args).arg("--help").output().expect("runs switchyard");
        if !out.status.success() {
            return Err(format!(
                "`switchyard {} --help` does not parse: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// `PROGRAM [SUB] --help` names each `--flag` of `args`.
    fn check_help(&self, program: &[&str], args: &[&str]) -> Result<(), String> {
        let flags: Vec<&str> =
            args.iter().filter(|a| a.starts_with("--")).map(|a| a.split('=').next().unwrap()).collect();
        if flags.is_empty() {
            return Ok(());
        }
        let out = self.command(program[0]).args(&program[1..]).arg("--help").output();
        let out = out.map_err(|e| format!("running {}: {e}", program.join(" ")))?;
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in flags {
            if !help.contains(flag) {
                return Err(format!("`{} --help` does not name {flag}", program.join(" ")));
            }
        }
        Ok(())
    }
}

/// Shell words: split on spaces outside single or double quotes, quotes removed.
fn split_words(command: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for ch in command.chars() {
        match (quote, ch) {
            (None, '\'' | '"') => (quote, any) = (Some(ch), true),
            (Some(q), _) if ch == q => quote = None,
            (None, ' ' | '\t') => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            _ => (word.push(ch), any = true).1,
        }
    }
    if any {
        words.push(word);
    }
    words
}

/// Each non-empty line of `expected` is in `printed`: its pieces between `…` in order.
fn expect_lines(printed: &str, expected: &str) -> Result<(), String> {
    for line in expected.lines().filter(|l| !l.trim().is_empty()) {
        let mut rest = printed;
        for piece in line.split('…').map(str::trim).filter(|p| !p.is_empty()) {
            match rest.find(piece) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => {
                    return Err(format!(
                        "expected `{line}`: `{piece}` is not in what it printed:\n{printed}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Follows `page` (relative to the checkout) in a fresh scratch directory; panics with
/// the failing block. Returns the run, for further checks.
fn follow(page: &str, c: bool) -> Run {
    let text = std::fs::read_to_string(checkout().join(page)).unwrap();
    let mut run = Run::new(page, c);
    if let Err(e) = run.follow(&text) {
        panic!("{e}");
    }
    run
}

/// The channel `rust-toolchain.toml` pins.
fn channel(toml: &str) -> String {
    let line = toml.lines().find(|l| l.starts_with("channel")).expect("a channel");
    line.split('"').nth(1).expect("a quoted channel").to_string()
}

#[test]
fn the_rust_guide_builds_from_an_empty_directory_on_an_older_default_toolchain() {
    let page = "docs/writing-policies.md";
    let probe = Run::new("probe", false);
    let default = probe.bash("rustc --version");
    eprintln!("the default toolchain here: {}", String::from_utf8_lossy(&default.stdout).trim());
    let run = follow(page, false);
    // The page's crate pins the repository's toolchain, and that is what built it.
    let pin = channel(&std::fs::read_to_string(checkout().join("rust-toolchain.toml")).unwrap());
    let crate_dir = run.root.join("my-chwbl");
    let theirs = channel(&std::fs::read_to_string(crate_dir.join("rust-toolchain.toml")).unwrap());
    assert_eq!(theirs, pin, "{page}'s rust-toolchain.toml pins the repository's toolchain");
    let mut run = run;
    run.cwd = crate_dir;
    let used = run.bash("rustc --version");
    assert!(String::from_utf8_lossy(&used.stdout).contains(&pin), "the crate builds with {pin}");
    let _ = std::fs::remove_dir_all(&run.root);
    let _ = std::fs::remove_dir_all(&probe.root);
}

#[test]
fn the_c_guide_builds_from_an_empty_directory() {
    let run = follow("docs/writing-policies-c.md", true);
    assert!(run.root.join("mine/mine.wasm").is_file());
    let _ = std::fs::remove_dir_all(&run.root);
}

#[test]
fn the_readme_commands_parse() {
    let run = follow("README.md", false);
    let _ = std::fs::remove_dir_all(&run.root);
}

/// The mechanism itself: a renamed flag, a missing output line and an unmarked block each
/// fail the page.
#[test]
fn a_documented_command_that_stopped_working_fails_its_page() {
    let cases = [
        ("<!-- doc-test: no-run -->\n```sh\nswitchyard select --policy default --guests\n```\n", "--guests"),
        ("<!-- doc-test: no-run -->\n```sh\ncargo test --workspace --lockd\n```\n", "--lockd"),
        ("```text\n$ switchyard policy list\n\"name\": \"no-such-policy\"\n```\n", "no-such-policy"),
        ("```sh\nswitchyard policy check missing.wasm\n```\n", "failed"),
        ("```rust\nfn main() {}\n```\n", "neither run"),
    ];
    for (page, says) in cases {
        let mut run = Run::new("broken", false);
        let err = run.follow(page).expect_err(page);
        assert!(err.contains(says), "{page}: {err}");
        let _ = std::fs::remove_dir_all(&run.root);
    }
    let mut run = Run::new("fine", false);
    run.follow("<!-- doc-test: no-run -->\n```sh\nswitchyard select --policy default --guest\n```\n")
        .unwrap();
    let _ = std::fs::remove_dir_all(&run.root);
}
