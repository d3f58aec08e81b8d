// Fills in the server's time from /api/time (so the page shows that a
// script loaded and a JSON call worked), and the protocol the server saw
// that fetch come over, and streams /stream's events on request with
// EventSource.
"use strict";

async function showTime() {
	const el = document.getElementById("time");
	try {
		const resp = await fetch("/api/time", { cache: "no-store" });
		const t = await resp.json();
		el.textContent = "server time " + t.time + " (" + t.unix_ms + " ms)";
		el.className = "ok";
		document.getElementById("api-proto").textContent = t.proto;
	} catch (err) {
		el.textContent = "fetching /api/time failed: " + err;
	}
}

function streamEvents() {
	const list = document.getElementById("events");
	list.replaceChildren();
	const n = 10;
	const src = new EventSource("/stream?n=" + n);
	src.onmessage = (ev) => {
		const li = document.createElement("li");
		li.textContent = ev.data;
		list.appendChild(li);
		// The server ends the stream after n events; EventSource would
		// reconnect and start over, so close it here.
		if (list.children.length >= n) {
			src.close();
		}
	};
	src.onerror = () => src.close();
}

document.getElementById("start").addEventListener("click", streamEvents);
showTime();
