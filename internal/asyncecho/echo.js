// An echo server and client on Node.js (libuv's epoll loop); the command
// line and output are asyncecho's (asyncecho.go): serve PORT, or
// send HOST PORT CONNS IN_FLIGHT SIZE ROUNDS.
"use strict";
const net = require("net"), crypto = require("crypto");
const CONN_TIMEOUT_MS = 20000; // how long one connection may take before it counts as hung
const RESETS = new Set(["ECONNRESET", "ECONNABORTED", "EPIPE"]);

function serve(port) {
  // allowHalfOpen: the echo goes on after the client's FIN; pipe ends it after the last byte.
  net.createServer({ allowHalfOpen: true }, s => {
    s.on("error", e => console.error("server socket:", e.message));
    s.pipe(s);
  }).listen(port, "0.0.0.0");
}

// one echoes size bytes (the connection's number in the first four) and
// resolves to "ok", "reset", "timeout" or "other".
function one(host, port, i, base) {
  const data = Buffer.from(base);
  data.writeUInt32BE(i, 0);
  return new Promise(done => {
    const chunks = [];
    let settled = false;
    const finish = (how, why) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (why) console.error("connection", i, why);
      s.destroy();
      done(how);
    };
    const timer = setTimeout(() => finish("timeout", `no echo within ${CONN_TIMEOUT_MS} ms`), CONN_TIMEOUT_MS);
    const s = net.connect({ host, port, allowHalfOpen: true }, () => s.end(data));
    s.on("data", d => chunks.push(d));
    s.on("end", () => {
      const got = Buffer.concat(chunks);
      if (got.equals(data)) finish("ok");
      else finish("other", `echo differs: ${got.length} of ${data.length} bytes`);
    });
    s.on("error", e => finish(RESETS.has(e.code) ? "reset" : "other", e.message));
  });
}

async function round(host, port, conns, inFlight, size, tally) {
  const base = crypto.randomBytes(size);
  let next = 0;
  const worker = async () => {
    while (next < conns) tally[await one(host, port, next++, base)]++;
  };
  await Promise.all(Array.from({ length: Math.min(inFlight, conns) }, worker));
}

async function send(host, port, conns, inFlight, size, rounds) {
  const tally = { ok: 0, reset: 0, timeout: 0, other: 0 };
  for (let r = 0; r < rounds; r++) {
    const start = process.hrtime.bigint();
    await round(host, port, conns, inFlight, size, tally);
    console.log(`round ${(Number(process.hrtime.bigint() - start) / 1e9).toFixed(6)}`);
  }
  console.log(`failed reset ${tally.reset} timeout ${tally.timeout} other ${tally.other}`);
  console.log(`OK ${tally.ok}`);
}

// The mode's word starts the arguments, with `node -e` or a script file alike.
const a = process.argv.slice(process.argv.findIndex(x => x === "serve" || x === "send"));
if (a[0] === "serve") serve(+a[1]);
else send(a[1], +a[2], +a[3], +a[4], +a[5], +a[6]);
