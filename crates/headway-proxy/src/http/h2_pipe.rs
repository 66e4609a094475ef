//! A body sent on an HTTP/2 stream as the peer's flow-control window allows: the client's
//! request body to an HTTP/2 server (`upstream_h2`), an answer's body to an HTTP/2 client
//! (`h2_server`).

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use hyper::body::Body;

/// Sends `body` on `stream`, its trailers included, and ends the stream. A body that fails
/// resets the stream with `failed`; a stream the peer reset (it answered early, or gave up) ends
/// the sending, noticed while the body makes it wait.
pub(super) async fn pipe<B>(mut body: B, mut stream: h2::SendStream<Bytes>, failed: h2::Reason)
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    loop {
        // The stream is asked whether the peer reset it only while the body makes it wait
        // (asking costs a lock of the connection's streams).
        let frame = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(f) => Poll::Ready(Some(f)),
            Poll::Pending if stream.poll_reset(cx).is_ready() => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        })
        .await;
        let Some(frame) = frame else { return };
        match frame {
            None => {
                let _ = stream.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "a body sent over HTTP/2 failed; resetting its stream");
                stream.send_reset(failed);
                return;
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(data) => {
                    let end = body.is_end_stream();
                    if send_data(&mut stream, data, end).await.is_err() || end {
                        return;
                    }
                }
                Err(f) => {
                    match f.into_trailers() {
                        Ok(t) => {
                            let _ = stream.send_trailers(t);
                        }
                        Err(_) => {
                            let _ = stream.send_data(Bytes::new(), true);
                        }
                    }
                    return;
                }
            },
        }
    }
}

/// Sends `data` on `stream` as its window opens, the stream's end with the last of it when
/// `end`.
async fn send_data(
    stream: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), h2::Error> {
    if data.is_empty() {
        return if end {
            stream.send_data(data, true)
        } else {
            Ok(())
        };
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(r) => r?,
            None => return Err(h2::Error::from(h2::Reason::STREAM_CLOSED)),
        };
        if granted == 0 {
            continue;
        }
        let piece = data.split_to(granted.min(data.len()));
        stream.send_data(piece, end && data.is_empty())?;
    }
    Ok(())
}
