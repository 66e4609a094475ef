//! Zero-copy byte moving between sockets with `splice(2)` through a pipe, for the ADC's L4
//! path: bytes go from one socket's receive queue to the other's send queue inside the kernel,
//! never through user space.
//!
//! [`Pipe`] is a non-blocking pipe sized for the copy; [`Pipe::fill`] moves bytes from a socket
//! into it and [`Pipe::drain`] from it into a socket. Both are non-blocking (they return
//! `WouldBlock` when the socket or pipe is not ready), so an async shell calls them inside its
//! runtime's readiness (`tokio::net::TcpStream::try_io`). There is no `unsafe` here: `nix`
//! wraps the calls.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};

/// A non-blocking pipe used as the in-kernel buffer of one direction of a splice copy.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
    /// Bytes in the pipe.
    held: usize,
}

impl Pipe {
    /// A pipe holding up to about `capacity` bytes (the kernel rounds to pages; the default
    /// 64 KiB is kept if the size cannot be set).
    pub fn new(capacity: usize) -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let capacity = match fcntl(&write, FcntlArg::F_SETPIPE_SZ(capacity as i32)) {
            Ok(n) => usize::try_from(n).unwrap_or(65536),
            Err(_) => 65536,
        };
        Ok(Pipe {
            read,
            write,
            capacity,
            held: 0,
        })
    }

    /// Bytes waiting in the pipe.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Moves what `from` has received (up to the pipe's free space) into the pipe. `Ok(0)`
    /// means `from` reached the end of its stream (or the pipe is full: check [`Pipe::held`]).
    pub fn fill(&mut self, from: &impl AsFd) -> io::Result<usize> {
        let room = self.capacity - self.held;
        if room == 0 {
            return Ok(0);
        }
        let n = splice(
            from,
            None,
            &self.write,
            None,
            room,
            SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK,
        )?;
        self.held += n;
        Ok(n)
    }

    /// Moves bytes from the pipe into `to`; returns how many.
    pub fn drain(&mut self, to: &impl AsFd) -> io::Result<usize> {
        if self.held == 0 {
            return Ok(0);
        }
        let n = splice(
            &self.read,
            None,
            to,
            None,
            self.held,
            SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK,
        )?;
        self.held -= n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn bytes_go_from_one_socket_to_another_through_the_pipe() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let l2 = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l2.local_addr().unwrap()).unwrap();
        let (mut d, _) = l2.accept().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        a.write_all(&data).unwrap();
        a.shutdown(std::net::Shutdown::Write).unwrap();
        let mut p = Pipe::new(1 << 20).unwrap();
        let mut moved = 0;
        let mut eof = false;
        while !eof || p.held() > 0 {
            if !eof {
                match p.fill(&b) {
                    Ok(0) if p.held() < 4096 => eof = true,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
            match p.drain(&c) {
                Ok(n) => moved += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(moved, data.len());
        drop(c);
        let mut back = Vec::new();
        d.read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
    }
}
