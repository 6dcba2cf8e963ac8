//! A helper process (`javac`, the ZooKeeper CLI, a Curator peer, `initdb`, `psql`, the
//! `mariadb` client) whose output is captured.

use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crate::{HarnessError, POLL_INTERVAL};

/// A running process with its stdout and stderr read on threads of their own, so that a full
/// pipe never blocks it. Dropping it kills the process.
pub(crate) struct Captured {
    what: String,
    child: Child,
    output: Vec<JoinHandle<String>>,
}

impl Captured {
    /// Spawns `command`, which `what` names in errors; `spawn_error` says why the program
    /// (named by its first argument) could not be run, e.g. which package installs it.
    pub(crate) fn spawn(
        command: &mut Command,
        what: String,
        spawn_error: impl FnOnce(&str, io::Error) -> HarnessError,
    ) -> Result<Captured, HarnessError> {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| spawn_error(&program, e))?;
        let output = [
            child.stdout.take().map(read_all),
            child.stderr.take().map(read_all),
        ];
        Ok(Captured {
            what,
            child,
            output: output.into_iter().flatten().collect(),
        })
    }

    /// Waits until the process exits or `deadline` passes, then [`finish`](Self::finish)es.
    pub(crate) fn wait(mut self, deadline: Instant) -> Result<String, HarnessError> {
        while !self.has_exited()? && Instant::now() < deadline {
            thread::sleep(POLL_INTERVAL);
        }
        self.finish()
    }

    /// Whether the process has exited.
    pub(crate) fn has_exited(&mut self) -> Result<bool, HarnessError> {
        let status = self.child.try_wait();
        let status = status.map_err(|e| HarnessError::io(format!("wait for {}", self.what), e))?;
        Ok(status.is_some())
    }

    /// Kills the process if it still runs; then what it printed, stdout first, if it
    /// succeeded, or the error that says how it ended, with what it printed.
    pub(crate) fn finish(&mut self) -> Result<String, HarnessError> {
        self.finish_split().map(|(stdout, stderr)| stdout + &stderr)
    }

    /// Waits as [`wait`](Self::wait) does; what it printed to stdout and to stderr, apart.
    pub(crate) fn wait_split(
        mut self,
        deadline: Instant,
    ) -> Result<(String, String), HarnessError> {
        while !self.has_exited()? && Instant::now() < deadline {
            thread::sleep(POLL_INTERVAL);
        }
        self.finish_split()
    }

    /// [`finish`](Self::finish), with stdout and stderr apart.
    fn finish_split(&mut self) -> Result<(String, String), HarnessError> {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => Some(status),
            _ => {
                self.kill();
                None
            }
        };
        let mut output = self
            .output
            .drain(..)
            .map(|reader| reader.join().unwrap_or_default());
        let stdout = output.next().unwrap_or_default();
        let stderr = output.next().unwrap_or_default();
        finished(&self.what, status, format!("{stdout}{stderr}")).map(|_| (stdout, stderr))
    }

    fn kill(&mut self) {
        // Fails only if it already exited; `wait` reaps it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut out = Vec::new();
        // A read error ends the output early; the exit status still tells.
        let _ = pipe.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
}

fn finished(
    what: &str,
    status: Option<ExitStatus>,
    output: String,
) -> Result<String, HarnessError> {
    match status {
        Some(status) if status.success() => Ok(output),
        status => Err(HarnessError::ProcessFailed {
            what: what.to_owned(),
            status,
            output,
        }),
    }
}
