// A webhook receiver for the tests, checking every request with the
// Standard Webhooks reference package (`standardwebhooks`, an independent
// implementation). The first path segment says how it answers:
//   ok      200 once the signature checks out (401 if it does not)
//   flaky   500 on a message id's first request, 200 afterwards
//   hang    never answers
//   slow    200 after 100 ms (once the signature checks out)
//   gone    410 with a short explanation
//   busy    429 with Retry-After: 2 on a message id's first request, 200 afterwards
//   moved   307 to the same path under `ok` on host "localhost" (another host)
// Each request is printed as one JSON line: {mode, id, verified, key, traceparent, body, at,
// headers} (at: milliseconds since the epoch; headers: all of them, names in lower case).
// Usage: node webhook_receiver.mjs <port> <whsec_secret> [cert.pem key.pem]
import http from "node:http";
import https from "node:https";
import fs from "node:fs";
import { Webhook } from "standardwebhooks";

const [port, secret, cert, key] = process.argv.slice(2);
const wh = new Webhook(secret);
const seen = new Set();

function handle(req, res) {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const mode = req.url.split("/")[1];
    let verified = false;
    try {
      wh.verify(body, req.headers);
      verified = true;
    } catch (e) {
      verified = false;
    }
    const id = req.headers["webhook-id"];
    console.log(
      JSON.stringify({
        mode,
        path: req.url,
        id,
        verified,
        key: req.headers["postbox-key"] ?? null,
        traceparent: req.headers["traceparent"] ?? null,
        body,
        at: Date.now(),
        headers: req.headers,
      }),
    );
    if (!verified) {
      res.writeHead(401).end("bad signature");
    } else if (mode === "ok") {
      res.writeHead(200).end();
    } else if (mode === "flaky") {
      if (seen.has(id)) res.writeHead(200).end();
      else {
        seen.add(id);
        res.writeHead(500).end("try again");
      }
    } else if (mode === "busy") {
      if (seen.has(id)) res.writeHead(200).end();
      else {
        seen.add(id);
        res.writeHead(429, { "retry-after": "2" }).end("slow down");
      }
    } else if (mode === "slow") {
      setTimeout(() => res.writeHead(200).end(), 100);
    } else if (mode === "hang") {
      // never answers
    } else if (mode === "gone") {
      res.writeHead(410).end("this hook was removed; subscribe again");
    } else if (mode === "moved") {
      const to = `http://localhost:${port}/ok/${req.url.split("/").slice(2).join("/")}`;
      res.writeHead(307, { location: to }).end();
    } else {
      res.writeHead(404).end("no such mode");
    }
  });
}

const server = cert
  ? https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, handle)
  : http.createServer(handle);
server.listen(Number(port), "127.0.0.1", () => console.log(`listening ${port}`));
