//! stdio mode's transport: newline-delimited JSON-RPC over rmcp's `stdio_pipes`, framed
//! and decoded here rather than by rmcp's codec, which drops a line it cannot decode (too
//! long, nested too deep, not JSON-RPC) and leaves its sender waiting forever. Here such a
//! request is answered ([`crate::framing`]), and a line is never held past
//! [`MESSAGE_BYTES_MAX`]. A `subscriptions/listen` request naming a key the caller may not
//! read is answered here too, before rmcp could acknowledge it ([`refuse_listen`]); stdin
//! is read on once it is checked, so messages reach rmcp in the order they were sent.
//!
//! Two tasks: one reads and decodes stdin, one writes stdout. Everything written (rmcp's
//! messages and the reader's refusals) goes through the writer's queue, one whole line at
//! a time.

use std::future::Future;

use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::framing::{Incoming, MESSAGE_BYTES_MAX};
use crate::gateway::Caller;
use crate::server::refuse_listen;

/// Decoded messages waiting for rmcp; reading stops while it is full.
const INCOMING_QUEUE: usize = 64;
/// Lines waiting for stdout.
const OUTGOING_QUEUE: usize = 256;
/// A UTF-8 byte order mark, which some clients put before their first message.
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// Messages from stdin, decoded; messages to stdout.
pub struct Stdio {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    outgoing: Option<mpsc::Sender<Vec<u8>>>,
    reader: JoinHandle<()>,
    writer: Option<JoinHandle<()>>,
}

/// The process's stdin and stdout, whose listen requests are checked for `caller` (stdio
/// mode's one caller).
pub fn stdio(caller: Option<Caller>) -> Stdio {
    let (reader, writer) = rmcp::transport::stdio_pipes();
    Stdio::over(reader, writer, caller)
}

impl Stdio {
    pub fn over(
        input: impl AsyncRead + Send + Unpin + 'static,
        output: impl AsyncWrite + Send + Unpin + 'static,
        caller: Option<Caller>,
    ) -> Stdio {
        let (incoming_tx, incoming) = mpsc::channel(INCOMING_QUEUE);
        let (outgoing, outgoing_rx) = mpsc::channel(OUTGOING_QUEUE);
        let writer = tokio::spawn(write_lines(output, outgoing_rx));
        let reader = tokio::spawn(read_lines(input, caller, incoming_tx, outgoing.clone()));
        Stdio {
            incoming,
            outgoing: Some(outgoing),
            reader,
            writer: Some(writer),
        }
    }
}

impl Transport<RoleServer> for Stdio {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let outgoing = self.outgoing.clone();
        async move {
            let line = serde_json::to_vec(&item)?;
            let closed = || std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout closed");
            outgoing
                .ok_or_else(closed)?
                .send(line)
                .await
                .map_err(|_| closed())
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.incoming.recv()
    }

    /// Stops reading, then lets the writer finish what is queued.
    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.reader.abort();
        self.outgoing = None;
        let writer = self.writer.take();
        async move {
            if let Some(writer) = writer {
                writer.await.map_err(std::io::Error::other)?;
            }
            Ok(())
        }
    }
}

/// Writes each queued message as one line, until every sender is gone or stdout fails.
async fn write_lines(mut output: impl AsyncWrite + Unpin, mut lines: mpsc::Receiver<Vec<u8>>) {
    while let Some(mut line) = lines.recv().await {
        line.push(b'\n');
        let written = async {
            output.write_all(&line).await?;
            output.flush().await
        };
        if let Err(err) = written.await {
            tracing::warn!(error = %err, "stdout failed; no more answers can be sent");
            return;
        }
    }
}

/// Reads stdin line by line until it ends, handing decoded messages to rmcp and answering
/// the ones that cannot be decoded. A line longer than [`MESSAGE_BYTES_MAX`] is scanned
/// to its end but not kept.
async fn read_lines(
    input: impl AsyncRead + Unpin,
    caller: Option<Caller>,
    incoming: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    outgoing: mpsc::Sender<Vec<u8>>,
) {
    let mut input = BufReader::new(input);
    let mut line = Incoming::default();
    loop {
        let buffer = match input.fill_buf().await {
            Ok(buffer) => buffer,
            Err(err) => {
                tracing::warn!(error = %err, "reading stdin failed; stopping");
                return;
            }
        };
        let at_end = buffer.is_empty();
        let newline = buffer.iter().position(|b| *b == b'\n');
        let piece = &buffer[..newline.unwrap_or(buffer.len())];
        line.push(piece);
        let consumed = newline.map_or(piece.len(), |at| at + 1);
        input.consume(consumed);
        if newline.is_none() && !at_end {
            continue;
        }
        let complete = std::mem::take(&mut line);
        if !deliver(&complete, caller.as_ref(), &incoming, &outgoing).await || at_end {
            return;
        }
    }
}

/// Decodes one line and hands it on, or answers why it cannot be (or why `caller` may not
/// listen to what it names); `false` once rmcp has stopped receiving.
async fn deliver(
    line: &Incoming,
    caller: Option<&Caller>,
    incoming: &mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    outgoing: &mpsc::Sender<Vec<u8>>,
) -> bool {
    let text = line.kept();
    let text = text.strip_prefix(UTF8_BOM).unwrap_or(text);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    if line.bytes() <= MESSAGE_BYTES_MAX && text.iter().all(u8::is_ascii_whitespace) {
        return true;
    }
    let answer = match line.decode(text) {
        Ok(message) => match refuse_listen(&message, caller).await {
            None => return incoming.send(message).await.is_ok(),
            Some(refusal) => serde_json::to_vec(&refusal),
        },
        Err(None) => return true,
        Err(Some(answer)) => serde_json::to_vec(&answer),
    };
    match answer {
        Ok(answer) => outgoing.send(answer).await.is_ok(),
        Err(_) => true,
    }
}
