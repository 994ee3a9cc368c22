// An async echo server and client on tokio (edge-triggered epoll, a
// multi-threaded runtime): `serve PORT`, or `send HOST:PORT CONNS IN_FLIGHT SIZE`,
// which prints "OK n" for the connections whose echo came back intact.
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

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

async fn one(addr: String, i: usize, size: usize) -> Result<(), String> {
    let data: Vec<u8> = (0..size).map(|k| ((k * 2654435761usize) >> 13) as u8 ^ i as u8).collect();
    let s = TcpStream::connect(&addr).await.map_err(|e| format!("connect: {e}"))?;
    let (mut r, mut w) = s.into_split();
    let d2 = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&d2).await.map_err(|e| format!("write: {e}"))?;
        w.shutdown().await.map_err(|e| format!("shutdown: {e}"))
    });
    let mut got = Vec::with_capacity(size);
    r.read_to_end(&mut got).await.map_err(|e| format!("read: {e}"))?;
    writer.await.map_err(|e| format!("join: {e}"))??;
    if got != data {
        return Err(format!("echo differs: {} of {} bytes", got.len(), size));
    }
    Ok(())
}

async fn send(addr: String, conns: usize, in_flight: usize, size: usize) {
    let sem = Arc::new(Semaphore::new(in_flight));
    let mut tasks = Vec::new();
    for i in 0..conns {
        let permit = sem.clone().acquire_owned().await.unwrap();
        let a = addr.clone();
        tasks.push(tokio::spawn(async move {
            let r = tokio::time::timeout(std::time::Duration::from_secs(30), one(a, i, size)).await;
            drop(permit);
            match r {
                Ok(Ok(())) => true,
                Ok(Err(e)) => { eprintln!("connection {i}: {e}"); false }
                Err(_) => { eprintln!("connection {i}: timed out after 30 s"); false }
            }
        }));
    }
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap() { ok += 1; }
    }
    println!("OK {ok}");
}

#[tokio::main]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a[1].as_str() {
        "serve" => serve(a[2].parse().unwrap()).await,
        _ => send(a[2].clone(), a[3].parse().unwrap(), a[4].parse().unwrap(), a[5].parse().unwrap()).await,
    }
}
