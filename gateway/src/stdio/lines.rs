//! Reading a child's output a line at a time without holding more than a bound: a line longer
//! than `max` bytes is reported as such (its first `max + 1` bytes kept) instead of growing a
//! buffer until the gateway runs out of memory.

use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncReadExt as _};

/// What [`read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    /// A whole line is in the buffer (without `\n` / `\r\n`); also the last one at end of
    /// input without a newline.
    Whole,
    /// The line is longer than the bound: the buffer holds its first `max + 1` bytes, the rest
    /// is still unread (see [`skip_rest`]).
    TooLong,
    /// End of input.
    End,
}

/// A buffer over this many bytes is given back after its line (one long line does not keep
/// its memory for the life of the child).
const KEEP_CAPACITY: usize = 64 * 1024;

/// Reads the next line of `reader` into `buf` (cleared first), at most `max` bytes of it.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    if buf.capacity() > KEEP_CAPACITY {
        *buf = Vec::new();
    }
    buf.clear();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    (&mut *reader).take(limit).read_until(b'\n', buf).await?;
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        return Ok(Line::Whole);
    }
    if buf.len() > max {
        return Ok(Line::TooLong);
    }
    Ok(if buf.is_empty() {
        Line::End
    } else {
        Line::Whole
    })
}

/// Reads past the rest of the current line (after [`Line::TooLong`]) without keeping it; each
/// piece of it (without the `\n`) is shown to `inspect` first.
pub(crate) async fn skip_rest<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    mut inspect: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(());
        }
        match available.iter().position(|b| *b == b'\n') {
            Some(at) => {
                inspect(available.get(..at).unwrap_or_default());
                reader.consume(at + 1);
                return Ok(());
            }
            None => {
                let n = available.len();
                inspect(available);
                reader.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn all(input: &[u8], max: usize) -> Vec<(Line, String)> {
        let mut reader = tokio::io::BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for _ in 0..100 {
            let line = read_line(&mut reader, &mut buf, max).await.unwrap();
            out.push((line, String::from_utf8_lossy(&buf).into_owned()));
            match line {
                Line::End => break,
                Line::TooLong => skip_rest(&mut reader, |_| {}).await.unwrap(),
                Line::Whole => {}
            }
        }
        out
    }

    #[tokio::test]
    async fn lines_up_to_the_bound_pass_and_longer_ones_are_cut() {
        use Line::*;
        let s = |t: &str| t.to_owned();
        assert_eq!(
            all(b"one\r\ntwelve bytes\nlast", 12).await,
            [
                (Whole, s("one")),
                (Whole, s("twelve bytes")),
                (Whole, s("last")),
                (End, s(""))
            ]
        );
        assert_eq!(
            all(b"thirteen bytes\nok\n", 12).await,
            [
                (TooLong, s("thirteen byte")),
                (Whole, s("ok")),
                (End, s(""))
            ]
        );
        assert_eq!(all(b"", 12).await, [(End, s(""))]);
        assert_eq!(
            all(b"\n\n", 12).await,
            [(Whole, s("")), (Whole, s("")), (End, s(""))]
        );
    }

    #[tokio::test]
    async fn a_line_that_never_ends_is_never_held_whole() {
        // 8 MiB without a newline: reading stops at the bound, skipping holds nothing.
        let endless = vec![b'x'; 8 * 1024 * 1024];
        let mut reader = tokio::io::BufReader::new(&endless[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut buf, 1024).await.unwrap(),
            Line::TooLong
        );
        assert_eq!(buf.len(), 1025);
        assert!(buf.capacity() < 64 * 1024, "{}", buf.capacity());
        let mut seen = 0;
        skip_rest(&mut reader, |piece| seen += piece.len())
            .await
            .unwrap();
        assert_eq!(seen, endless.len() - 1025, "every byte is seen once");
        assert_eq!(
            read_line(&mut reader, &mut buf, 1024).await.unwrap(),
            Line::End
        );
    }
}
