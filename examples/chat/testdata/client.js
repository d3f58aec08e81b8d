// A chat client on the npm "ws" package, which TestNode runs:
//
//   NODE_PATH=<dir holding ws> node client.js ws://127.0.0.1:PORT/ws PEER
//
// It joins the room twice, first without compression as "node", then
// with permessage-deflate as "nodez". Each time it sends a message (a
// large, compressible one on the compressed connection) and waits for
// the room to send back both that message and "hello from PEER" from the
// Go client named PEER, which sends it on seeing the join. It prints
// PASS and exits 0, or prints why and exits 1.
"use strict";
const WebSocket = require("ws");

const [url, peer] = process.argv.slice(2);
const fail = (why) => { console.log("FAIL " + why); process.exit(1); };
setTimeout(() => fail("timed out"), 15000).unref();

function session(name, compress, text) {
  return new Promise((resolve) => {
    const sock = new WebSocket(url + "?name=" + name, { perMessageDeflate: compress });
    let me = "", gotMine = false, gotPeer = false;
    sock.on("open", () => {
      const agreed = sock.extensions.includes("permessage-deflate");
      if (agreed !== compress) fail(name + ": permessage-deflate agreed " + agreed + ", offered " + compress);
    });
    sock.on("message", (data, isBinary) => {
      if (isBinary) fail(name + ": a binary message");
      const e = JSON.parse(data.toString());
      if (e.kind === "hello") { me = e.from; sock.send(text); }
      if (e.kind === "msg" && e.from === me && e.text === text) gotMine = true;
      if (e.kind === "msg" && e.from.startsWith(peer + "#") && e.text === "hello from " + peer) gotPeer = true;
      if (gotMine && gotPeer) {
        console.log("ok " + me + " compressed=" + compress);
        sock.close(1000);
      }
    });
    sock.on("close", (code) => {
      if (!(gotMine && gotPeer)) fail(name + ": closed with " + code + " (own echo " + gotMine + ", peer's " + gotPeer + ")");
      resolve();
    });
    sock.on("error", (err) => fail(name + ": " + err.message));
  });
}

(async () => {
  await session("node", false, "hello from node");
  await session("nodez", true, "hello from nodez " + "compressible ".repeat(2000));
  console.log("PASS");
})();
