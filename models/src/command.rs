//! The command adapter (`model: {kind: command, argv: […]}`): a local program answers one JSON
//! line per request line ([`line`](mod@line) has the format).
//!
//! The program is started at the first turn, in the agent's folder, and kept: it answers one
//! request at a time, in order (turns of several runs queue for it). Its stderr goes to the log,
//! a line at a time. An answer that does not come within `timeout_s`, or a program that exits,
//! is a transient failure: the program is killed and started again for the next attempt, up to
//! `max_retries` times. A program that cannot be started, or answers with something that is not
//! an answer line, fails the turn at once. The program is killed when the agent stops.

pub mod line;

use std::process::Stdio;
use std::time::Duration;

use consort_config::CommandModel;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;
use tracing::{Instrument, info, warn};

use self::line::Answer;
use crate::repair::Draft;
use crate::turn::{self, TurnSettings, TurnTransport, Usage};
use crate::{Message, Model, ModelError, ModelFuture, ModelRequest, ToolSpec};

/// The longest answer line read.
const MAX_LINE: u64 = 16 << 20;
/// The pause before a restarted program is asked again.
const RESTART_PAUSE: Duration = Duration::from_millis(200);

/// A model played by a local program.
#[derive(Debug)]
pub struct CommandAdapter {
    config: CommandModel,
    agent: String,
    description: String,
    program: Mutex<Option<Running>>,
}

/// The running program and its pipes.
#[derive(Debug)]
struct Running {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// How one exchange ended without an answer.
enum ExchangeError {
    /// The program died, hung or broke a pipe: restart and try again.
    Transient(String),
    /// Not worth another attempt.
    Final(ModelError),
}

impl CommandAdapter {
    /// An adapter for `config`, for agent `agent` (its `description` goes into the system
    /// prompt). Nothing is started until the first turn.
    pub fn new(config: CommandModel, agent: String, description: String) -> Self {
        Self {
            config,
            agent,
            description,
            program: Mutex::new(None),
        }
    }

    fn start(&self) -> Result<Running, ModelError> {
        let (program, args) = self
            .config
            .argv
            .split_first()
            .ok_or_else(|| ModelError::Config("`argv` is empty".into()))?;
        // A relative program path names a file in the agent's folder, as the docs promise,
        // whatever the host's own working directory is.
        let path = if program.contains('/') && !program.starts_with('/') {
            self.config.dir.join(program)
        } else {
            program.into()
        };
        let mut child = Command::new(&path)
            .args(args)
            .current_dir(&self.config.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                ModelError::Config(format!(
                    "the model program `{program}` could not be started in {}: {e}",
                    self.config.dir.display()
                ))
            })?;
        let (Some(stdin), Some(stdout), stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(ModelError::Config(
                "the model program's pipes could not be opened".into(),
            ));
        };
        if let Some(stderr) = stderr {
            let agent = self.agent.clone();
            tokio::spawn(
                async move {
                    let mut lines = BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        info!(agent = %agent, "model program: {line}");
                    }
                }
                .in_current_span(),
            );
        }
        info!(agent = %self.agent, pid = child.id().unwrap_or_default(), "model program started");
        Ok(Running {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// Writes one request line and reads one answer line.
    async fn exchange(
        running: &mut Running,
        request: &str,
        timeout: Duration,
    ) -> Result<String, ExchangeError> {
        let io = async {
            running.stdin.write_all(request.as_bytes()).await?;
            running.stdin.write_all(b"\n").await?;
            running.stdin.flush().await?;
            let mut answer = Vec::new();
            let read = (&mut running.stdout)
                .take(MAX_LINE)
                .read_until(b'\n', &mut answer)
                .await?;
            Ok::<_, std::io::Error>((read, answer))
        };
        let (read, answer) = match tokio::time::timeout(timeout, io).await {
            Err(_) => {
                return Err(ExchangeError::Transient(format!(
                    "no answer within {} s",
                    timeout.as_secs()
                )));
            }
            Ok(Err(e)) => return Err(ExchangeError::Transient(format!("the pipe broke: {e}"))),
            Ok(Ok(x)) => x,
        };
        if read == 0 {
            let status = running.child.try_wait().ok().flatten().map_or_else(
                || "closed its output".to_owned(),
                |s| format!("exited ({s})"),
            );
            return Err(ExchangeError::Transient(format!(
                "the model program {status} without answering"
            )));
        }
        if !answer.ends_with(b"\n") && read as u64 >= MAX_LINE {
            return Err(ExchangeError::Final(ModelError::Protocol(
                "the model program's answer line is longer than 16 MiB".into(),
            )));
        }
        String::from_utf8(answer).map_err(|_| {
            ExchangeError::Final(ModelError::Protocol(
                "the model program's answer is not UTF-8".into(),
            ))
        })
    }
}

impl TurnTransport for CommandAdapter {
    async fn send_turn(
        &self,
        request: &ModelRequest<'_>,
        system: &str,
        conversation: &[Message],
        tools: &[ToolSpec],
    ) -> Result<(Draft, Usage), ModelError> {
        let text = line::request_line(request, system, conversation, tools);
        let timeout = Duration::from_secs(u64::from(self.config.timeout_s));
        // One request at a time: the program reads and answers in order.
        let mut program = self.program.lock().await;
        let mut attempt = 0;
        loop {
            attempt += 1;
            if program.is_none() {
                *program = Some(self.start()?);
            }
            let Some(running) = program.as_mut() else {
                continue;
            };
            let failure = match Self::exchange(running, &text, timeout).await {
                Ok(answer) => match line::parse_answer(answer.trim_end()) {
                    Ok(Answer::Turn(draft, usage)) => return Ok((draft, usage)),
                    Ok(Answer::Error(text)) => {
                        return Err(ModelError::Failed(format!(
                            "the model program said: {text}"
                        )));
                    }
                    Err(e) => {
                        // Out of step with the program: start afresh next time.
                        *program = None;
                        return Err(ModelError::Protocol(e));
                    }
                },
                Err(ExchangeError::Final(e)) => {
                    *program = None;
                    return Err(e);
                }
                Err(ExchangeError::Transient(why)) => why,
            };
            // Dropping the child kills it (kill_on_drop): a hung program is not left behind.
            *program = None;
            if attempt > self.config.max_retries {
                return Err(ModelError::Unavailable {
                    attempts: attempt,
                    last: failure,
                });
            }
            warn!(agent = %self.agent, attempt, "model program failed, restarting it: {failure}");
            tokio::time::sleep(RESTART_PAUSE).await;
        }
    }
}

impl Model for CommandAdapter {
    fn respond<'a>(&'a self, request: ModelRequest<'a>) -> ModelFuture<'a> {
        Box::pin(async move {
            let settings = TurnSettings {
                description: &self.description,
                system: self.config.system.as_deref(),
                repair_attempts: self.config.repair_attempts,
                answer_tool: false,
            };
            turn::ask(self, &request, settings).await
        })
    }
}
