// An async echo server and client on tokio (edge-triggered epoll, a
// multi-threaded runtime); the command line and output are asyncecho's
// (internal/asyncecho/asyncecho.go): `serve PORT`, or
// `send HOST PORT CONNS IN_FLIGHT SIZE ROUNDS`.
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

// How long one connection may take before it counts as hung.
const CONN_TIMEOUT: Duration = Duration::from_secs(20);

async fn serve(port: u16) {
    let l = TcpListener::bind(("0.0.0.0", port)).await.expect("bind");
    loop {
        let (mut s, _) = l.accept().await.expect("accept");
        tokio::spawn(async move {
            let (mut r, mut w) = s.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        });
    }
}

enum Failure { Reset(String), Other(String) }

fn failure(what: &str, e: std::io::Error) -> Failure {
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => Failure::Reset(format!("{what}: {e}")),
        _ => Failure::Other(format!("{what}: {e}")),
    }
}

async fn one(addr: String, i: usize, size: usize) -> Result<(), Failure> {
    let data: Vec<u8> = (0..size).map(|k| ((k * 2654435761usize) >> 13) as u8 ^ i as u8).collect();
    let s = TcpStream::connect(&addr).await.map_err(|e| failure("connect", e))?;
    let (mut r, mut w) = s.into_split();
    let d2 = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&d2).await.map_err(|e| failure("write", e))?;
        w.shutdown().await.map_err(|e| failure("shutdown", e))
    });
    let mut got = Vec::with_capacity(size);
    r.read_to_end(&mut got).await.map_err(|e| failure("read", e))?;
    writer.await.map_err(|e| Failure::Other(format!("join: {e}")))??;
    if got != data {
        return Err(Failure::Other(format!("echo differs: {} of {} bytes", got.len(), size)));
    }
    Ok(())
}

// Counts of intact, reset, hung and otherwise failed connections.
#[derive(Default)]
struct Tally { ok: usize, reset: usize, timeout: usize, other: usize }

async fn round(addr: &str, conns: usize, in_flight: usize, size: usize, t: &mut Tally) {
    let sem = Arc::new(Semaphore::new(in_flight));
    let mut tasks = Vec::new();
    for i in 0..conns {
        let permit = sem.clone().acquire_owned().await.unwrap();
        let a = addr.to_string();
        tasks.push(tokio::spawn(async move {
            let r = tokio::time::timeout(CONN_TIMEOUT, one(a, i, size)).await;
            drop(permit);
            (i, r)
        }));
    }
    for task in tasks {
        match task.await.unwrap() {
            (_, Ok(Ok(()))) => t.ok += 1,
            (i, Ok(Err(Failure::Reset(e)))) => { eprintln!("connection {i}: {e}"); t.reset += 1 }
            (i, Ok(Err(Failure::Other(e)))) => { eprintln!("connection {i}: {e}"); t.other += 1 }
            (i, Err(_)) => { eprintln!("connection {i}: no echo within {CONN_TIMEOUT:?}"); t.timeout += 1 }
        }
    }
}

#[tokio::main]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a[1] == "serve" {
        return serve(a[2].parse().unwrap()).await;
    }
    let addr = format!("{}:{}", a[2], a[3]);
    let n: Vec<usize> = a[4..8].iter().map(|s| s.parse().unwrap()).collect();
    let mut t = Tally::default();
    for _ in 0..n[3] {
        let start = Instant::now();
        round(&addr, n[0], n[1], n[2], &mut t).await;
        println!("round {:.6}", start.elapsed().as_secs_f64());
    }
    println!("failed reset {} timeout {} other {}", t.reset, t.timeout, t.other);
    println!("OK {}", t.ok);
}
